package approval_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hiddeco/sshsig"
	"github.com/nlx-dev/nlx/approval"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/plan"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// statement is a valid statement; tests change one field at a time.
func statement() approval.Statement {
	return approval.Statement{
		Version:   approval.StatementVersion,
		PlanHash:  "sha256:" + strings.Repeat("ab", 32),
		Address:   "workspace.alpha",
		Risk:      plan.RiskDestructive,
		Actor:     "carol",
		Reason:    "alpha's image moves to bookworm -> trixie; chats <reset> & kept",
		ExpiresAt: "2026-12-02T10:00:00Z",
	}
}

// need returns the path of an OpenSSH program, or skips the test (fails
// it under CI=true, where .ci/run installs openssh-client).
func need(t testing.TB, tool string) string { return testtool.Need(t, tool) }

// run runs an OpenSSH program and returns its combined output.
func run(t testing.TB, stdin []byte, name string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(need(t, name), args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK=")
	return cmd.CombinedOutput()
}

// keygen makes a key with ssh-keygen in a new temporary directory and
// returns the private key's path; args are the type and size options.
func keygen(t testing.TB, passphrase string, args ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "id")
	args = append(args, "-q", "-N", passphrase, "-C", "carol@example", "-f", path)
	if out, err := run(t, nil, "ssh-keygen", args...); err != nil {
		t.Fatalf("ssh-keygen %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return path
}

// keyTypes are the key types the signing tests run with.
var keyTypes = []struct {
	name string
	args []string
}{
	{"ed25519", []string{"-t", "ed25519"}},
	{"ecdsa", []string{"-t", "ecdsa", "-b", "256"}},
	{"rsa3072", []string{"-t", "rsa", "-b", "3072"}},
}

func loadSigner(t testing.TB, path string) ssh.Signer {
	t.Helper()
	s, err := approval.LoadSigner(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readPub(t testing.TB, key string) ssh.PublicKey {
	t.Helper()
	b, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	k, err := approval.ParsePublicKey(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// sshVerify runs ssh-keygen -Y verify of the pair at path for carol, whose
// key is key.pub, under namespace.
func sshVerify(t *testing.T, key, path, namespace string) ([]byte, error) {
	t.Helper()
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(t.TempDir(), "allowed_signers")
	if err := os.WriteFile(allowed, append([]byte("carol "), pub...), 0o644); err != nil {
		t.Fatal(err)
	}
	msg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return run(t, msg, "ssh-keygen", "-Y", "verify", "-f", allowed, "-I", "carol", "-n", namespace, "-s", path+".sig")
}

func TestMessage(t *testing.T) {
	s := statement()
	want := `{"version":1,"plan_hash":"sha256:` + strings.Repeat("ab", 32) + `","address":"workspace.alpha","risk":"destructive","actor":"carol",` +
		`"reason":"alpha's image moves to bookworm -> trixie; chats <reset> & kept","expires_at":"2026-12-02T10:00:00Z"}` + "\n"
	if got := string(s.Message()); got != want {
		t.Errorf("Message() =\n%s\nwant\n%s", got, want)
	}
	if !bytes.Equal(s.Message(), s.Message()) {
		t.Error("Message() differs between calls")
	}
	exp, err := s.Expires()
	if err != nil || !exp.Equal(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("Expires() = %v, %v; want 2026-12-02 10:00 UTC", exp, err)
	}
	if got, want := approval.FileName(s), "abababababab.workspace.alpha.destructive.carol.json"; got != want {
		t.Errorf("FileName = %q, want %q", got, want)
	}
	if got := approval.FileName(approval.Statement{PlanHash: "x"}); got != "x....json" {
		t.Errorf("FileName of a malformed statement = %q, want x...json (and no panic)", got)
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name   string
		change func(*approval.Statement)
		want   string // "" for valid
	}{
		{"valid", func(*approval.Statement) {}, ""},
		{"version 0", func(s *approval.Statement) { s.Version = 0 }, "version 0"},
		{"version 2", func(s *approval.Statement) { s.Version = 2 }, "version 2"},
		{"plan hash without prefix", func(s *approval.Statement) { s.PlanHash = strings.Repeat("ab", 32) }, "plan_hash"},
		{"plan hash short", func(s *approval.Statement) { s.PlanHash = "sha256:abc" }, "plan_hash"},
		{"plan hash upper case", func(s *approval.Statement) { s.PlanHash = "sha256:" + strings.Repeat("AB", 32) }, "plan_hash"},
		{"address without kind", func(s *approval.Statement) { s.Address = "alpha" }, "address"},
		{"address traversal", func(s *approval.Statement) { s.Address = "../x.y" }, "address"},
		{"address slash", func(s *approval.Statement) { s.Address = "workspace.a/b" }, "address"},
		{"risk empty", func(s *approval.Statement) { s.Risk = "" }, "risk is empty"},
		{"risk with slash", func(s *approval.Statement) { s.Risk = "a/b" }, "risk"},
		{"actor upper", func(s *approval.Statement) { s.Actor = "Carol" }, "actor"},
		{"actor empty", func(s *approval.Statement) { s.Actor = "" }, "actor"},
		{"actor too long", func(s *approval.Statement) { s.Actor = "a" + strings.Repeat("b", 63) }, "actor"},
		{"reason blank", func(s *approval.Statement) { s.Reason = " \t\n" }, "reason is empty"},
		{"reason not utf-8", func(s *approval.Statement) { s.Reason = "bad \xff" }, "UTF-8"},
		{"expires not rfc3339", func(s *approval.Statement) { s.ExpiresAt = "2026-12-02 10:00:00" }, "expires_at"},
		{"expires with offset", func(s *approval.Statement) { s.ExpiresAt = "2026-12-02T11:00:00+01:00" }, "UTC"},
		{"expires with fraction", func(s *approval.Statement) { s.ExpiresAt = "2026-12-02T10:00:00.5Z" }, "seconds precision"},
		{"expires lower z", func(s *approval.Statement) { s.ExpiresAt = "2026-12-02T10:00:00z" }, "expires_at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := statement()
			tt.change(&s)
			err := s.Check()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("Check() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("Check() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	t.Run("every broken rule at once", func(t *testing.T) {
		err := approval.Statement{}.Check()
		for _, want := range []string{"version", "plan_hash", "address", "risk", "actor", "reason", "expires_at"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Check() of the zero statement = %v, want it to name %s", err, want)
			}
		}
	})
}

// TestSSHKeygenVerifiesNLX: ssh-keygen -Y verify accepts what Sign and
// WriteFile write, under nlx-approval only; for ed25519, whose signatures
// are deterministic, nlx's signature file is byte for byte ssh-keygen's.
func TestSSHKeygenVerifiesNLX(t *testing.T) {
	for _, kt := range keyTypes {
		t.Run(kt.name, func(t *testing.T) {
			key := keygen(t, "", kt.args...)
			signed, err := approval.Sign(statement(), loadSigner(t, key))
			if err != nil {
				t.Fatal(err)
			}
			if want := approval.Fingerprint(readPub(t, key)); signed.Fingerprint != want {
				t.Errorf("Fingerprint = %s, want %s", signed.Fingerprint, want)
			}
			dir := filepath.Join(t.TempDir(), "approvals", "new")
			path, err := approval.WriteFile(dir, signed)
			if err != nil {
				t.Fatal(err)
			}
			if want := filepath.Join(dir, approval.FileName(statement())); path != want {
				t.Errorf("WriteFile = %s, want %s", path, want)
			}
			for _, p := range []string{path, path + ".sig"} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != 0o644 {
					t.Errorf("%s: mode %v, want 0644", p, fi.Mode().Perm())
				}
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 2 {
				t.Errorf("WriteFile left %d files, want 2 (no temporary files)", len(entries))
			}
			if out, err := sshVerify(t, key, path, approval.Namespace); err != nil {
				t.Errorf("ssh-keygen -Y verify -n %s: %v\n%s", approval.Namespace, err, out)
			}
			if out, err := sshVerify(t, key, path, approval.ActorNamespace); err == nil {
				t.Errorf("ssh-keygen -Y verify -n %s accepted an approval:\n%s", approval.ActorNamespace, out)
			}
			if kt.name == "ed25519" {
				out, err := run(t, nil, "ssh-keygen", "-Y", "sign", "-n", approval.Namespace, "-f", key, path)
				if err != nil {
					t.Fatalf("ssh-keygen -Y sign: %v\n%s", err, out)
				}
				theirs, err := os.ReadFile(path + ".sig") // ssh-keygen overwrote nlx's
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(signed.Signature, theirs) {
					t.Errorf("nlx's signature\n%s\nis not ssh-keygen's\n%s", signed.Signature, theirs)
				}
			}
		})
	}
}

// TestNLXVerifiesSSHKeygen: Parse accepts ssh-keygen -Y sign's signatures
// of a Message file, with either hash, and refuses another namespace.
func TestNLXVerifiesSSHKeygen(t *testing.T) {
	for _, kt := range keyTypes {
		t.Run(kt.name, func(t *testing.T) {
			key := keygen(t, "", kt.args...)
			s := statement()
			msg := s.Message()
			file := filepath.Join(t.TempDir(), approval.FileName(s))
			if err := os.WriteFile(file, msg, 0o644); err != nil {
				t.Fatal(err)
			}
			sign := func(t *testing.T, args ...string) []byte {
				t.Helper()
				os.Remove(file + ".sig")
				args = append([]string{"-Y", "sign", "-f", key}, append(args, file)...)
				if out, err := run(t, nil, "ssh-keygen", args...); err != nil {
					t.Fatalf("ssh-keygen %s: %v\n%s", strings.Join(args, " "), err, out)
				}
				sig, err := os.ReadFile(file + ".sig")
				if err != nil {
					t.Fatal(err)
				}
				return sig
			}
			for _, hash := range []string{"sha512", "sha256"} {
				t.Run(hash, func(t *testing.T) {
					sig := sign(t, "-n", approval.Namespace, "-O", "hashalg="+hash)
					got, err := approval.Parse(msg, sig)
					if err != nil {
						t.Fatalf("Parse of ssh-keygen's signature: %v", err)
					}
					if got.Statement != s {
						t.Errorf("Statement = %+v, want %+v", got.Statement, s)
					}
					if want := approval.Fingerprint(readPub(t, key)); got.Fingerprint != want {
						t.Errorf("Fingerprint = %s, want %s", got.Fingerprint, want)
					}
					if !strings.HasPrefix(got.Digest, "sha256:") || len(got.Digest) != len("sha256:")+64 {
						t.Errorf("Digest = %q, want sha256:<64 hex>", got.Digest)
					}
					// ssh-keygen hashes the file as it is, final newline
					// included: without it the signature does not verify.
					if _, err := approval.Parse(bytes.TrimSuffix(msg, []byte("\n")), sig); err == nil {
						t.Error("Parse accepted the message without its final newline")
					}
				})
			}
			t.Run("other namespace", func(t *testing.T) {
				sig := sign(t, "-n", "other")
				_, err := approval.Parse(msg, sig)
				if !errors.Is(err, approval.ErrInvalidSignature) || !strings.Contains(err.Error(), `namespace "other"`) {
					t.Errorf("Parse of a signature under namespace other = %v, want %v naming the namespace", err, approval.ErrInvalidSignature)
				}
			})
		})
	}
}

// inProcess signs with a fresh in-process ed25519 key: no ssh-keygen, for
// the refusals and the fuzz seeds.
func inProcess(t testing.TB) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rawSign signs message under namespace with sshsig alone (no Check),
// armored as ssh-keygen does.
func rawSign(t testing.TB, signer ssh.Signer, message []byte, namespace string) []byte {
	t.Helper()
	sig, err := sshsig.Sign(bytes.NewReader(message), signer, sshsig.HashSHA512, namespace)
	if err != nil {
		t.Fatal(err)
	}
	return rewrap(sshsig.Armor(sig), 70)
}

// withRest re-armors the signature with a byte after the signature proper,
// which ed25519 verification ignores.
func withRest(t testing.TB, armored []byte) []byte {
	t.Helper()
	sig, err := sshsig.Unarmor(armored)
	if err != nil {
		t.Fatal(err)
	}
	sig.Signature.Rest = []byte{1}
	return rewrap(sshsig.Armor(sig), 70)
}

// truncatedBlob re-armors the signature without its last 10 bytes.
func truncatedBlob(armored []byte) []byte {
	block, _ := pem.Decode(armored)
	return rewrap(pem.EncodeToMemory(&pem.Block{Type: block.Type, Bytes: block.Bytes[:len(block.Bytes)-10]}), 70)
}

// rewrap re-lays an armored signature's base64 in lines of width.
func rewrap(armored []byte, width int) []byte {
	lines := strings.Split(strings.TrimSpace(string(armored)), "\n")
	b64 := strings.Join(lines[1:len(lines)-1], "")
	var b strings.Builder
	b.WriteString(lines[0] + "\n")
	for len(b64) > width {
		b.WriteString(b64[:width] + "\n")
		b64 = b64[width:]
	}
	b.WriteString(b64 + "\n" + lines[len(lines)-1] + "\n")
	return []byte(b.String())
}

func TestParseRefuses(t *testing.T) {
	signer := inProcess(t)
	good, err := approval.Sign(statement(), signer)
	if err != nil {
		t.Fatal(err)
	}
	msg, sig := good.Message, good.Signature
	if _, err := approval.Parse(msg, sig); err != nil {
		t.Fatalf("Parse of a good pair: %v", err)
	}
	if !bytes.Equal(rewrap(sig, 70), sig) {
		t.Fatal("rewrap(70) changes nlx's armor")
	}

	tampered := bytes.Replace(msg, []byte("bookworm"), []byte("bookwork"), 1)
	extra := bytes.Replace(msg, []byte(`{"version":1,`), []byte(`{"version":1,"extra":true,`), 1)
	reordered := bytes.Replace(msg, []byte(`"version":1,"plan_hash":"sha256:`+strings.Repeat("ab", 32)+`",`),
		[]byte(`"plan_hash":"sha256:`+strings.Repeat("ab", 32)+`","version":1,`), 1)
	spaced := bytes.ReplaceAll(msg, []byte(`","`), []byte(`", "`))
	upperKey := bytes.Replace(msg, []byte(`"reason"`), []byte(`"Reason"`), 1)
	dup := bytes.Replace(msg, []byte(`{"version":1,`), []byte(`{"version":1,"version":1,`), 1)
	bad := statement()
	bad.Actor = "Carol"
	badMsg := bad.Message()
	otherNS := rawSign(t, signer, msg, approval.ActorNamespace)
	pemArmor := rewrap(sig, 64) // valid, but laid out as pem.Encode does

	tests := []struct {
		name     string
		msg, sig []byte
		is       error
		want     string
	}{
		{"tampered reason", tampered, sig, approval.ErrInvalidSignature, "does not verify"},
		{"extra field", extra, rawSign(t, signer, extra, approval.Namespace), approval.ErrInvalidStatement, `unknown field "extra"`},
		{"reordered keys", reordered, rawSign(t, signer, reordered, approval.Namespace), approval.ErrInvalidStatement, "differs at byte 2"},
		{"whitespace", spaced, rawSign(t, signer, spaced, approval.Namespace), approval.ErrInvalidStatement, "not the canonical form"},
		{"indented", append(bytes.ReplaceAll(msg[:len(msg)-1], []byte(","), []byte(",\n  ")), '\n'), sig, approval.ErrInvalidStatement, "not the canonical form"},
		{"key in another case", upperKey, sig, approval.ErrInvalidStatement, "not the canonical form"},
		{"duplicate key", dup, sig, approval.ErrInvalidStatement, "not the canonical form"},
		{"no final newline", msg[:len(msg)-1], sig, approval.ErrInvalidStatement, "lacks its final newline"},
		{"CRLF", append(append([]byte{}, msg[:len(msg)-1]...), '\r', '\n'), sig, approval.ErrInvalidStatement, "not the canonical form"},
		{"trailing data", append(append([]byte{}, msg...), msg...), sig, approval.ErrInvalidStatement, "bytes after"},
		{"fails Check", badMsg, rawSign(t, signer, badMsg, approval.Namespace), approval.ErrInvalidStatement, "actor"},
		{"empty message", nil, sig, approval.ErrInvalidStatement, "decode"},
		{"garbage message", []byte("\x00\xffnot json"), sig, approval.ErrInvalidStatement, "decode"},
		{"oversize message", bytes.Repeat([]byte(" "), 64<<10+1), sig, approval.ErrInvalidStatement, "larger than"},
		{"truncated signature", msg, sig[:len(sig)/2], approval.ErrInvalidSignature, "BEGIN SSH SIGNATURE"},
		{"truncated blob", msg, truncatedBlob(sig), approval.ErrInvalidSignature, "parse"},
		{"garbage signature", msg, []byte("garbage"), approval.ErrInvalidSignature, "BEGIN SSH SIGNATURE"},
		{"empty signature", msg, nil, approval.ErrInvalidSignature, "BEGIN SSH SIGNATURE"},
		{"oversize signature", msg, bytes.Repeat([]byte("A"), 64<<10+1), approval.ErrInvalidSignature, "larger than"},
		{"other PEM type", msg, []byte("-----BEGIN SSH PRIVATE KEY-----\nAAAA\n-----END SSH PRIVATE KEY-----\n"), approval.ErrInvalidSignature, "PEM block of type"},
		{"namespace nlx-actor", msg, otherNS, approval.ErrInvalidSignature, `namespace "nlx-actor"`},
		{"pem armor 64 columns", msg, pemArmor, approval.ErrInvalidSignature, "armored layout"},
		{"text before the armor", msg, append([]byte("note\n"), sig...), approval.ErrInvalidSignature, "armored layout"},
		{"text after the armor", msg, append(append([]byte{}, sig...), '\n'), approval.ErrInvalidSignature, "armored layout"},
		{"no final newline in armor", msg, sig[:len(sig)-1], approval.ErrInvalidSignature, "armored layout"},
		{"CRLF armor", msg, bytes.ReplaceAll(sig, []byte("\n"), []byte("\r\n")), approval.ErrInvalidSignature, "armored layout"},
		{"bytes after the signature proper", msg, withRest(t, sig), approval.ErrInvalidSignature, "1 unexpected bytes after the ssh-ed25519 signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := approval.Parse(tt.msg, tt.sig)
			if got != nil {
				t.Errorf("Parse returned %+v with its error", got)
			}
			if err == nil {
				t.Fatalf("Parse = %+v, want an error", got)
			}
			if !errors.Is(err, tt.is) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse error = %v, want %v containing %q", err, tt.is, tt.want)
			}
		})
	}
}

// TestParseRefusesWeakKey: an RSA key under 2048 bits, which ssh-keygen
// still makes and signs with, is refused both ways.
func TestParseRefusesWeakKey(t *testing.T) {
	key := keygen(t, "", "-t", "rsa", "-b", "1024")
	s := statement()
	file := filepath.Join(t.TempDir(), "x.json")
	if err := os.WriteFile(file, s.Message(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, nil, "ssh-keygen", "-Y", "sign", "-n", approval.Namespace, "-f", key, file); err != nil {
		t.Fatalf("ssh-keygen -Y sign: %v\n%s", err, out)
	}
	sig, err := os.ReadFile(file + ".sig")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := approval.Parse(s.Message(), sig); !errors.Is(err, approval.ErrInvalidSignature) || !strings.Contains(err.Error(), "1024 bits") {
		t.Errorf("Parse of an RSA 1024 signature = %v, want %v naming 1024 bits", err, approval.ErrInvalidSignature)
	}
	if _, err := approval.Sign(s, loadSignerOrNil(t, key)); err == nil {
		t.Error("Sign with an RSA 1024 key succeeded")
	}
}

// loadSignerOrNil parses an unencrypted key without LoadSigner's checks.
func loadSignerOrNil(t testing.TB, path string) ssh.Signer {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.ParsePrivateKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func FuzzParse(f *testing.F) {
	signer := inProcess(f)
	good, err := approval.Sign(statement(), signer)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good.Message, good.Signature)
	f.Add(good.Message[:len(good.Message)-1], good.Signature[:len(good.Signature)-1])
	f.Add([]byte(`{"version":1}`), []byte("-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n"))
	f.Add([]byte{}, []byte{})
	f.Add([]byte("null\n"), []byte("-----BEGIN SSH SIGNATURE-----\n\n-----END SSH SIGNATURE-----\n"))
	f.Fuzz(func(t *testing.T, message, armored []byte) {
		s, err := approval.Parse(message, armored)
		if err == nil && (s.Key == nil || s.Check() != nil || !bytes.Equal(s.Statement.Message(), message)) {
			t.Errorf("Parse accepted %q with %q as %+v", message, armored, s)
		}
	})
}

func TestReadDir(t *testing.T) {
	signer := inProcess(t)
	sign := func(t *testing.T, change func(*approval.Statement)) *approval.Signed {
		t.Helper()
		s := statement()
		change(&s)
		signed, err := approval.Sign(s, signer)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	write := func(t *testing.T, dir string, signed ...*approval.Signed) []string {
		t.Helper()
		var paths []string
		for _, s := range signed {
			p, err := approval.WriteFile(dir, s)
			if err != nil {
				t.Fatal(err)
			}
			paths = append(paths, p)
		}
		return paths
	}
	a := sign(t, func(s *approval.Statement) { s.Address = "workspace.beta" })
	b := sign(t, func(s *approval.Statement) { s.Risk = plan.RiskImageMigration })

	t.Run("pairs", func(t *testing.T) {
		dir := t.TempDir()
		paths := write(t, dir, a, b)
		if err := os.WriteFile(filepath.Join(dir, "README"), []byte("not an approval"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := approval.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		// In name order: abab....workspace.alpha.image_migration before
		// abab....workspace.beta.destructive.
		want := []string{paths[1], paths[0]}
		if len(got) != len(want) {
			t.Fatalf("ReadDir = %d approvals, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i].File != want[i] {
				t.Errorf("approval %d: File = %s, want %s", i, got[i].File, want[i])
			}
		}
		if got[0].Statement != b.Statement || got[0].Digest != b.Digest || got[0].Fingerprint != approval.Fingerprint(signer.PublicKey()) {
			t.Errorf("approval 0 = %+v, want %+v", got[0], b)
		}
	})
	t.Run("empty", func(t *testing.T) {
		got, err := approval.ReadDir(t.TempDir())
		if err != nil || got == nil || len(got) != 0 {
			t.Errorf("ReadDir of an empty dir = %v, %v; want an empty slice", got, err)
		}
	})
	tests := []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{"missing dir", func(t *testing.T, dir string) { os.Remove(dir) }, []string{"no such file"}},
		{"lone json", func(t *testing.T, dir string) {
			p := write(t, dir, a, b)
			os.Remove(p[0] + ".sig")
		}, []string{approval.FileName(a.Statement) + ": no signature " + approval.FileName(a.Statement) + ".sig"}},
		{"lone sig", func(t *testing.T, dir string) {
			p := write(t, dir, a, b)
			os.Remove(p[1])
		}, []string{approval.FileName(b.Statement) + ".sig: no statement"}},
		{"sig of no json", func(t *testing.T, dir string) {
			write(t, dir, a)
			os.WriteFile(filepath.Join(dir, "notes.sig"), a.Signature, 0o644)
		}, []string{"notes.sig: no statement notes"}},
		{"both at once", func(t *testing.T, dir string) {
			p := write(t, dir, a, b)
			os.Remove(p[0] + ".sig")
			os.Remove(p[1])
		}, []string{"no signature", "no statement"}},
		{"renamed", func(t *testing.T, dir string) {
			p := write(t, dir, a)
			os.Rename(p[0], filepath.Join(dir, "x.json"))
			os.Rename(p[0]+".sig", filepath.Join(dir, "x.json.sig"))
		}, []string{"x.json: invalid approval statement: the file's name is not its statement's (" + approval.FileName(a.Statement) + ")"}},
		{"signature of another statement", func(t *testing.T, dir string) {
			p := write(t, dir, a, b)
			os.WriteFile(p[0]+".sig", b.Signature, 0o644)
		}, []string{approval.FileName(a.Statement) + ": invalid approval signature: does not verify"}},
		{"directory named json", func(t *testing.T, dir string) {
			os.Mkdir(filepath.Join(dir, "d.json"), 0o755)
			os.WriteFile(filepath.Join(dir, "d.json.sig"), a.Signature, 0o644)
		}, []string{"d.json is not a regular file"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "approvals")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tt.setup(t, dir)
			got, err := approval.ReadDir(dir)
			if err == nil {
				t.Fatalf("ReadDir = %d approvals, want an error", len(got))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("ReadDir error = %v, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestWriteFileRefusesUnverified(t *testing.T) {
	signer := inProcess(t)
	good, err := approval.Sign(statement(), signer)
	if err != nil {
		t.Fatal(err)
	}
	forged := *good
	forged.Reason = "something else"
	forged.Message = forged.Statement.Message()
	dir := filepath.Join(t.TempDir(), "approvals")
	if _, err := approval.WriteFile(dir, &forged); !errors.Is(err, approval.ErrInvalidSignature) {
		t.Errorf("WriteFile of a signature over other bytes = %v, want %v", err, approval.ErrInvalidSignature)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WriteFile that failed made %s (%v)", dir, err)
	}
}

func TestLoadSigner(t *testing.T) {
	t.Setenv("SSH_AUTH_SOCK", "")
	t.Run("unencrypted", func(t *testing.T) {
		key := keygen(t, "", "-t", "ed25519")
		s := loadSigner(t, key)
		if got, want := approval.Fingerprint(s.PublicKey()), approval.Fingerprint(readPub(t, key)); got != want {
			t.Errorf("LoadSigner key = %s, want %s", got, want)
		}
	})
	t.Run("encrypted without agent", func(t *testing.T) {
		key := keygen(t, "correct horse", "-t", "ed25519")
		_, err := approval.LoadSigner(key)
		if !errors.Is(err, approval.ErrNeedsAgent) || !strings.Contains(err.Error(), "ssh-add "+key) || !strings.Contains(err.Error(), "passphrase-protected") {
			t.Errorf("LoadSigner of an encrypted key = %v, want %v saying to ssh-add it", err, approval.ErrNeedsAgent)
		}
	})
	t.Run("public key without agent", func(t *testing.T) {
		key := keygen(t, "", "-t", "ed25519")
		_, err := approval.LoadSigner(key + ".pub")
		if !errors.Is(err, approval.ErrNeedsAgent) || !strings.Contains(err.Error(), "ssh-add "+key) {
			t.Errorf("LoadSigner of a public key = %v, want %v saying to ssh-add it", err, approval.ErrNeedsAgent)
		}
	})
	t.Run("not a key", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "id")
		os.WriteFile(path, []byte("hello\n"), 0o600)
		if _, err := approval.LoadSigner(path); err == nil || !strings.Contains(err.Error(), "not an OpenSSH private or public key") {
			t.Errorf("LoadSigner of a text file = %v, want it to say it is no key", err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if _, err := approval.LoadSigner(filepath.Join(t.TempDir(), "id")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("LoadSigner of a missing file = %v, want %v", err, os.ErrNotExist)
		}
	})
}

// startAgent starts ssh-agent on a socket in a temporary directory, for
// this test only, and points SSH_AUTH_SOCK at it.
func startAgent(t *testing.T) agent.ExtendedAgent {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	cmd := exec.Command(need(t, "ssh-agent"), "-D", "-a", sock)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	var conn net.Conn
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if conn, err = net.Dial("unix", sock); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("ssh-agent did not listen on %s: %v", sock, err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("SSH_AUTH_SOCK", sock)
	return agent.NewClient(conn)
}

func TestLoadSignerAgent(t *testing.T) {
	const pass = "correct horse"
	for _, kt := range keyTypes {
		t.Run(kt.name, func(t *testing.T) {
			key := keygen(t, pass, kt.args...)
			ag := startAgent(t)
			if _, err := approval.LoadSigner(key); !errors.Is(err, approval.ErrNeedsAgent) || !strings.Contains(err.Error(), "does not hold it") {
				t.Errorf("LoadSigner with an agent that lacks the key = %v, want %v saying the agent does not hold it", err, approval.ErrNeedsAgent)
			}
			data, err := os.ReadFile(key)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := ssh.ParseRawPrivateKeyWithPassphrase(data, []byte(pass))
			if err != nil {
				t.Fatal(err)
			}
			if err := ag.Add(agent.AddedKey{PrivateKey: raw}); err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{key, key + ".pub"} {
				signer := loadSigner(t, path)
				signed, err := approval.Sign(statement(), signer)
				if err != nil {
					t.Fatalf("Sign through the agent (%s): %v", filepath.Base(path), err)
				}
				p, err := approval.WriteFile(t.TempDir(), signed)
				if err != nil {
					t.Fatal(err)
				}
				if out, err := sshVerify(t, key, p, approval.Namespace); err != nil {
					t.Errorf("ssh-keygen -Y verify of the agent's signature (%s): %v\n%s", filepath.Base(path), err, out)
				}
			}
			t.Run("no pub beside", func(t *testing.T) {
				if err := os.Remove(key + ".pub"); err != nil {
					t.Fatal(err)
				}
				// An OpenSSH key file carries its public key unencrypted.
				if _, err := approval.LoadSigner(key); err != nil {
					t.Errorf("LoadSigner without .pub: %v", err)
				}
			})
		})
	}
}

func TestParsePublicKey(t *testing.T) {
	ed := keygen(t, "", "-t", "ed25519")
	rsa1024 := keygen(t, "", "-t", "rsa", "-b", "1024")
	line := func(key string) string {
		b, err := os.ReadFile(key + ".pub")
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	edLine := line(ed)
	fields := strings.Fields(edLine)
	tests := []struct {
		name, line string
		want       string // "" for accepted
	}{
		{"with comment", edLine, ""},
		{"with newline", edLine + "\n", ""},
		{"without comment", fields[0] + " " + fields[1], ""},
		{"options", `command="ls" ` + edLine, "options"},
		{"two keys on two lines", edLine + "\n" + edLine, "more than one line"},
		{"rsa 1024", line(rsa1024), "1024 bits"},
		{"empty", "", "public key"},
		{"garbage", "ssh-ed25519 AAAAnotbase64", "public key"},
		{"private key", "-----BEGIN OPENSSH PRIVATE KEY-----", "public key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := approval.ParsePublicKey(tt.line)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("ParsePublicKey = %v, want a key", err)
			case tt.want == "" && approval.Fingerprint(k) != approval.Fingerprint(readPub(t, ed)):
				t.Errorf("ParsePublicKey = %s, want %s", approval.Fingerprint(k), approval.Fingerprint(readPub(t, ed)))
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("ParsePublicKey = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestProveKey(t *testing.T) {
	for _, kt := range keyTypes {
		t.Run(kt.name, func(t *testing.T) {
			key := keygen(t, "", kt.args...)
			got, err := approval.ProveKey(loadSigner(t, key))
			if err != nil {
				t.Fatal(err)
			}
			out, err := run(t, nil, "ssh-keygen", "-lf", key+".pub")
			if err != nil {
				t.Fatalf("ssh-keygen -lf: %v\n%s", err, out)
			}
			// "3072 SHA256:... carol@example (RSA)"
			if f := strings.Fields(string(out)); len(f) < 2 || got != f[1] {
				t.Errorf("ProveKey = %s, want ssh-keygen -lf's %q", got, out)
			}
		})
	}
	t.Run("a signer without its key", func(t *testing.T) {
		if _, err := approval.ProveKey(liar{inProcess(t), inProcess(t).PublicKey()}); err == nil {
			t.Error("ProveKey of a signer claiming another key succeeded")
		}
	})
}

// liar is a signer that claims a key it does not sign with.
type liar struct {
	ssh.Signer
	pub ssh.PublicKey
}

func (l liar) PublicKey() ssh.PublicKey { return l.pub }
