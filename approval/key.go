package approval

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/hiddeco/sshsig"
	"github.com/nlx-dev/nlx/schema"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// ErrNeedsAgent is what LoadSigner returns, wrapped, for a key it can use
// only through ssh-agent (a passphrase-protected key, or a public key) when
// no agent holds it.
var ErrNeedsAgent = errors.New("key needs ssh-agent")

// Fingerprint is k's SHA-256 fingerprint as ssh-keygen -l prints it,
// "SHA256:..." (unpadded base64).
func Fingerprint(k ssh.PublicKey) string { return ssh.FingerprintSHA256(k) }

// ParsePublicKey reads one authorized_keys line as host.actors holds it
// (schema.ParseKey: one key, no options, no certificate, no DSA, RSA of
// 2048 to 16384 bits).
func ParsePublicKey(line string) (ssh.PublicKey, error) { return schema.ParseKey(line) }

// checkKey refuses keys nlx does not take approvals from: those the config
// refuses as an actor's key.
func checkKey(k ssh.PublicKey) error { return schema.CheckKey(k) }

// isSecurityKey reports whether k is a FIDO security key (sk-*), whose
// signatures carry flags and a counter after the signature proper.
func isSecurityKey(k ssh.PublicKey) bool {
	switch k.Type() {
	case ssh.KeyAlgoSKECDSA256, ssh.KeyAlgoSKED25519:
		return true
	}
	return false
}

// LoadSigner returns a signer for the key at path. An unencrypted OpenSSH
// (or PEM) private key is used directly. nlx never asks for a passphrase:
// a passphrase-protected key is used through ssh-agent (SSH_AUTH_SOCK), the
// agent's key matching path+".pub" (or, without one, the public key an
// OpenSSH key file carries unencrypted). path may also be the public key
// itself, as with ssh-keygen -Y sign -f KEY.pub. Without an agent holding
// the key, the error (wrapping ErrNeedsAgent) says to load it with ssh-add.
func LoadSigner(path string) (ssh.Signer, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, fmt.Errorf("load SSH key: %w", err)
	}
	if pub, _, _, _, err := ssh.ParseAuthorizedKey(data); err == nil {
		return agentSignerFor(path, pub, "is a public key")
	}
	signer, err := ssh.ParsePrivateKey(data)
	var missing *ssh.PassphraseMissingError
	switch {
	case err == nil:
		if err := checkKey(signer.PublicKey()); err != nil {
			return nil, fmt.Errorf("load SSH key %s: %w", path, err)
		}
		return signer, nil
	case errors.As(err, &missing):
		pub, err := pubBeside(path, missing.PublicKey)
		if err != nil {
			return nil, err
		}
		return agentSignerFor(path, pub, "is passphrase-protected")
	default:
		return nil, fmt.Errorf("load SSH key %s: not an OpenSSH private or public key: %w", path, err)
	}
}

// pubBeside is the public key of the encrypted private key at path: the one
// in path+".pub", or fromKey, what the key file itself says (nil for
// formats that encrypt it too); when there are both they must agree.
func pubBeside(path string, fromKey ssh.PublicKey) (ssh.PublicKey, error) {
	data, err := readFile(path + ".pub")
	switch {
	case errors.Is(err, os.ErrNotExist) && fromKey != nil:
		return fromKey, nil
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("load SSH key %s: %w: it is passphrase-protected and nlx does not read passphrases; finding it in ssh-agent needs %s.pub beside it", path, ErrNeedsAgent, path)
	case err != nil:
		return nil, fmt.Errorf("load SSH key %s: %w", path, err)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey(data)
	if err != nil {
		return nil, fmt.Errorf("load SSH key %s: %s.pub: %w", path, path, err)
	}
	if fromKey != nil && !bytes.Equal(pub.Marshal(), fromKey.Marshal()) {
		return nil, fmt.Errorf("load SSH key %s: %s.pub is key %s, but the key file is %s", path, path, Fingerprint(pub), Fingerprint(fromKey))
	}
	return pub, nil
}

// agentSignerFor is a signer for pub through the agent at SSH_AUTH_SOCK,
// once the agent is seen to hold it; what says why the key at path needs
// the agent.
func agentSignerFor(path string, pub ssh.PublicKey, what string) (ssh.Signer, error) {
	if err := checkKey(pub); err != nil {
		return nil, fmt.Errorf("load SSH key %s: %w", path, err)
	}
	sock := os.Getenv("SSH_AUTH_SOCK")
	if sock == "" {
		return nil, fmt.Errorf("load SSH key %s: %w: it %s and nlx does not read passphrases; load it into ssh-agent (ssh-add %s) and set SSH_AUTH_SOCK",
			path, ErrNeedsAgent, what, strings.TrimSuffix(path, ".pub"))
	}
	s := &agentSigner{sock: sock, pub: pub}
	var held bool
	err := s.with(func(c agent.ExtendedAgent) error {
		keys, err := c.List()
		for _, k := range keys {
			held = held || bytes.Equal(k.Marshal(), pub.Marshal())
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("load SSH key %s: ssh-agent at %s: %w", path, sock, err)
	}
	if !held {
		return nil, fmt.Errorf("load SSH key %s: %w: it %s and ssh-agent at %s does not hold it (%s); load it with ssh-add %s",
			path, ErrNeedsAgent, what, sock, Fingerprint(pub), strings.TrimSuffix(path, ".pub"))
	}
	return s, nil
}

// agentSigner signs through ssh-agent, connecting for each signature so
// that a signer held for a while keeps no connection open.
type agentSigner struct {
	sock string
	pub  ssh.PublicKey
}

var _ ssh.AlgorithmSigner = (*agentSigner)(nil)

func (s *agentSigner) PublicKey() ssh.PublicKey { return s.pub }

func (s *agentSigner) Sign(rand io.Reader, data []byte) (*ssh.Signature, error) {
	return s.SignWithAlgorithm(rand, data, "")
}

// SignWithAlgorithm asks the agent for a signature; for RSA keys the
// algorithm picks the hash (sshsig signs with rsa-sha2-512).
func (s *agentSigner) SignWithAlgorithm(_ io.Reader, data []byte, algorithm string) (*ssh.Signature, error) {
	var flags agent.SignatureFlags
	switch algorithm {
	case "", s.pub.Type():
	case ssh.KeyAlgoRSASHA256:
		flags = agent.SignatureFlagRsaSha256
	case ssh.KeyAlgoRSASHA512:
		flags = agent.SignatureFlagRsaSha512
	default:
		return nil, fmt.Errorf("ssh-agent: cannot sign with algorithm %q for a %s key", algorithm, s.pub.Type())
	}
	var sig *ssh.Signature
	err := s.with(func(c agent.ExtendedAgent) error {
		var err error
		sig, err = c.SignWithFlags(s.pub, data, flags)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("ssh-agent at %s: sign with %s: %w", s.sock, Fingerprint(s.pub), err)
	}
	return sig, nil
}

func (s *agentSigner) with(f func(agent.ExtendedAgent) error) error {
	conn, err := net.Dial("unix", s.sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(agent.NewClient(conn))
}

// ProveKey signs a fresh random challenge with signer under ActorNamespace and
// verifies it, returning the fingerprint of the key: proof the caller holds
// the private key (used by host commands that act for an actor, with --key).
func ProveKey(signer ssh.Signer) (string, error) {
	pub := signer.PublicKey()
	if err := checkKey(pub); err != nil {
		return "", fmt.Errorf("prove key: %w", err)
	}
	challenge := make([]byte, 32)
	if _, err := rand.Read(challenge); err != nil {
		return "", fmt.Errorf("prove key: %w", err)
	}
	sig, err := sshsig.Sign(bytes.NewReader(challenge), signer, sshsig.HashSHA512, ActorNamespace)
	if err != nil {
		return "", fmt.Errorf("prove key %s: sign: %w", Fingerprint(pub), err)
	}
	if err := sshsig.Verify(bytes.NewReader(challenge), sig, pub, sshsig.HashSHA512, ActorNamespace); err != nil {
		return "", fmt.Errorf("prove key %s: the signer's signature does not verify against its own key: %w", Fingerprint(pub), err)
	}
	return Fingerprint(pub), nil
}

// readFile reads at most maxSize bytes of path, and refuses a larger file.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(data) > maxSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSize)
	}
	return data, nil
}
