package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"

	"github.com/hiddeco/sshsig"
	"golang.org/x/crypto/ssh"
)

// Signed is a statement with its signature, verified cryptographically
// against the key the signature itself carries (whether that key belongs to the
// actor is the caller's check, against its applied state).
type Signed struct {
	Statement
	Message     []byte        // the statement's bytes as signed (as read from the file)
	Signature   []byte        // the armored "-----BEGIN SSH SIGNATURE-----" text
	Key         ssh.PublicKey // the signing key, from the signature
	Fingerprint string        // ssh.FingerprintSHA256(Key), "SHA256:..."
	Digest      string        // "sha256:<hex>" of Signature: identifies this approval for single use
	File        string        // where it was read from, if from a file; "" otherwise
}

// Sign signs s with signer under Namespace, hashing with SHA-512 as
// ssh-keygen does by default, and returns the approval as Parse reads it
// back. s must pass Check, and the key must be one Parse accepts.
func Sign(s Statement, signer ssh.Signer) (*Signed, error) {
	if err := s.Check(); err != nil {
		return nil, fmt.Errorf("sign approval: %w: %w", ErrInvalidStatement, err)
	}
	if err := checkKey(signer.PublicKey()); err != nil {
		return nil, fmt.Errorf("sign approval: %w", err)
	}
	msg := s.Message()
	sig, err := sshsig.Sign(bytes.NewReader(msg), signer, sshsig.HashSHA512, Namespace)
	if err != nil {
		return nil, fmt.Errorf("sign approval with %s: %w", Fingerprint(signer.PublicKey()), err)
	}
	// Read back as any verifier would: what Sign returns, Parse accepts.
	signed, err := Parse(msg, armor(sig))
	if err != nil {
		return nil, fmt.Errorf("sign approval: the signature made does not read back: %w", err)
	}
	return signed, nil
}

// Parse reads an approval from its message and armored signature, strictly.
// The message must decode as a Statement with no unknown fields and be
// exactly that statement's Message (one reading of the bytes, whoever reads
// them), and the statement must pass Check. The signature must be one PEM
// block in the layout ssh-keygen writes (so that Digest names the approval,
// not one of its spellings), under Namespace, hashed with SHA-256 or
// SHA-512, by a key nlx accepts, and verify against the key it carries.
// Each input may be at most 64 KiB.
func Parse(message, armored []byte) (*Signed, error) {
	if len(message) > maxSize {
		return nil, fmt.Errorf("%w: message of %d bytes is larger than %d", ErrInvalidStatement, len(message), maxSize)
	}
	if len(armored) > maxSize {
		return nil, fmt.Errorf("%w: signature of %d bytes is larger than %d", ErrInvalidSignature, len(armored), maxSize)
	}
	s, err := parseStatement(message)
	if err != nil {
		return nil, err
	}
	sig, err := unarmor(armored)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSignature, err)
	}
	if sig.Namespace != Namespace {
		return nil, fmt.Errorf("%w: namespace %q, not %q (sign with ssh-keygen -Y sign -n %s)", ErrInvalidSignature, sig.Namespace, Namespace, Namespace)
	}
	if err := checkKey(sig.PublicKey); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidSignature, err)
	}
	if err := sshsig.Verify(bytes.NewReader(message), sig, sig.PublicKey, sig.HashAlgorithm, Namespace); err != nil {
		return nil, fmt.Errorf("%w: does not verify against its key %s over the statement: %w", ErrInvalidSignature, Fingerprint(sig.PublicKey), err)
	}
	// Last, so that a signature that is wrong says so before it says it
	// is laid out wrong.
	if !bytes.Equal(armor(sig), armored) {
		return nil, fmt.Errorf("%w: not in the armored layout ssh-keygen writes (the BEGIN line, base64 in lines of 70, the END line, one newline after each, nothing else)", ErrInvalidSignature)
	}
	sum := sha256.Sum256(armored)
	return &Signed{
		Statement:   s,
		Message:     bytes.Clone(message),
		Signature:   bytes.Clone(armored),
		Key:         sig.PublicKey,
		Fingerprint: Fingerprint(sig.PublicKey),
		Digest:      "sha256:" + hex.EncodeToString(sum[:]),
	}, nil
}

// parseStatement decodes message and requires it to be the statement's
// canonical bytes.
func parseStatement(message []byte) (Statement, error) {
	var s Statement
	dec := json.NewDecoder(bytes.NewReader(message))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Statement{}, fmt.Errorf("%w: decode: %w", ErrInvalidStatement, err)
	}
	if want := s.Message(); !bytes.Equal(message, want) {
		return Statement{}, fmt.Errorf("%w: %s", ErrInvalidStatement, canonicalDiff(message, want))
	}
	if err := s.Check(); err != nil {
		return Statement{}, fmt.Errorf("%w: %w", ErrInvalidStatement, err)
	}
	return s, nil
}

// canonicalDiff says how got differs from want, the canonical bytes.
func canonicalDiff(got, want []byte) string {
	const form = "compact JSON, keys in order, one final newline"
	switch {
	case bytes.Equal(got, want[:len(want)-1]):
		return "message lacks its final newline"
	case bytes.HasPrefix(got, want):
		return fmt.Sprintf("message has %d bytes after the statement's final newline", len(got)-len(want))
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	return fmt.Sprintf("message is not the canonical form of its statement (%s): it differs at byte %d", form, i)
}

// armor writes sig as ssh-keygen does: base64 in lines of 70 characters
// between the BEGIN and END lines, and a final newline (pem.Encode would
// wrap at 64).
func armor(sig *sshsig.Signature) []byte {
	b64 := base64.StdEncoding.EncodeToString(sig.Marshal())
	var b bytes.Buffer
	b.WriteString("-----BEGIN " + sshsig.PEMType + "-----\n")
	for len(b64) > 70 {
		b.WriteString(b64[:70] + "\n")
		b64 = b64[70:]
	}
	b.WriteString(b64 + "\n")
	b.WriteString("-----END " + sshsig.PEMType + "-----\n")
	return b.Bytes()
}

// unarmor parses an armored signature and requires its wire form to be
// canonical; Parse then requires the armor to be exactly what armor writes
// for it. Any other spelling of the same signature (another line width,
// text around the block, a non-canonical wire encoding, trailing bytes)
// would be a second digest for one approval.
func unarmor(armored []byte) (*sshsig.Signature, error) {
	block, _ := pem.Decode(armored)
	if block == nil {
		return nil, fmt.Errorf("no -----BEGIN %s----- block", sshsig.PEMType)
	}
	if block.Type != sshsig.PEMType {
		return nil, fmt.Errorf("PEM block of type %q, not %q", block.Type, sshsig.PEMType)
	}
	if len(block.Headers) > 0 {
		return nil, fmt.Errorf("PEM block has headers; an SSH signature has none")
	}
	sig, err := sshsig.ParseSignature(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if !bytes.Equal(sig.Marshal(), block.Bytes) {
		return nil, fmt.Errorf("signature blob is not in canonical SSH wire form")
	}
	// The signature proper may carry trailing bytes that verification
	// ignores, except for security keys, whose flags and counter are there.
	if len(sig.Signature.Rest) > 0 && !isSecurityKey(sig.PublicKey) {
		return nil, fmt.Errorf("%d unexpected bytes after the %s signature", len(sig.Signature.Rest), sig.Signature.Format)
	}
	return sig, nil
}
