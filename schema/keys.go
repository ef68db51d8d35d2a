package schema

import (
	"bytes"
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// RSA key sizes nlx accepts: OpenSSH's own floor of 2048 bits, and a
// ceiling that keeps verifying a hostile signature cheap.
const (
	minRSABits = 2048
	maxRSABits = 16384
)

// maxKeyLine caps an authorized_keys line.
const maxKeyLine = 64 << 10

// KeyFingerprint parses one authorized_keys line (ParseKey) and returns its
// SHA256 fingerprint, as ssh-keygen -l prints it.
func KeyFingerprint(line string) (string, error) {
	k, err := ParseKey(line)
	if err != nil {
		return "", err
	}
	return ssh.FingerprintSHA256(k), nil
}

// ParseKey parses one authorized_keys line ("ssh-ed25519 AAAA... comment"),
// as host.actors holds an actor's key: one key, no options, not a
// certificate, and no key nlx refuses (DSA, RSA outside 2048 to 16384
// bits). The same rules hold for a key that signs an approval.
func ParseKey(line string) (ssh.PublicKey, error) {
	line = strings.TrimRight(line, "\r\n")
	if strings.ContainsAny(line, "\r\n") {
		return nil, errors.New("public key: more than one line; give one key")
	}
	if len(line) > maxKeyLine {
		return nil, fmt.Errorf("public key: %d bytes is larger than %d", len(line), maxKeyLine)
	}
	k, _, options, rest, err := ssh.ParseAuthorizedKey([]byte(line))
	if err != nil {
		return nil, fmt.Errorf("public key: %w (want one authorized_keys line, like ssh-ed25519 AAAA... comment)", err)
	}
	if len(options) > 0 {
		return nil, fmt.Errorf("public key: options %s are not allowed; give the key alone", strings.Join(options, ","))
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("public key: more than one key; give one")
	}
	if err := CheckKey(k); err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	return k, nil
}

// CheckKey refuses keys nlx does not take as an actor's, nor approvals
// from.
func CheckKey(k ssh.PublicKey) error {
	if _, ok := k.(*ssh.Certificate); ok {
		return fmt.Errorf("key %s is an SSH certificate; nlx takes plain keys", ssh.FingerprintSHA256(k))
	}
	switch k.Type() {
	case ssh.InsecureKeyAlgoDSA:
		return fmt.Errorf("key %s is a DSA key, which OpenSSH no longer accepts; use ed25519", ssh.FingerprintSHA256(k))
	case ssh.KeyAlgoRSA:
		ck, ok := k.(ssh.CryptoPublicKey)
		if !ok {
			return fmt.Errorf("key %s: RSA key of unknown size", ssh.FingerprintSHA256(k))
		}
		pub, ok := ck.CryptoPublicKey().(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("key %s: RSA key of unknown size", ssh.FingerprintSHA256(k))
		}
		switch bits := pub.N.BitLen(); {
		case bits < minRSABits:
			return fmt.Errorf("key %s is an RSA key of %d bits; nlx needs at least %d (or use ed25519)", ssh.FingerprintSHA256(k), bits, minRSABits)
		case bits > maxRSABits:
			return fmt.Errorf("key %s is an RSA key of %d bits; nlx takes at most %d", ssh.FingerprintSHA256(k), bits, maxRSABits)
		}
	}
	return nil
}
