// Package approval is how reviewers approve the risky changes of a saved
// plan: each approval is a Statement (one risk of one change of one plan)
// signed with the reviewer's SSH key in the SSH signature format (sshsig),
// exactly as `ssh-keygen -Y sign -n nlx-approval -f KEY FILE` writes it, so
// that `ssh-keygen -Y verify` checks nlx's approvals and nlx accepts
// ssh-keygen's. An approval on disk is a pair of files: the statement's bytes
// (NAME.json) and the armored signature over them (NAME.json.sig).
//
// This package checks the cryptography and the statement's shape; whether
// the signing key belongs to the actor, whether the plan hash, address and
// risk are the plan's, whether the approval has expired and whether it has
// been used are the caller's checks, against its applied state and clock.
package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nlx-dev/nlx/plan"
)

// Namespace is the sshsig namespace of approval signatures: ssh-keygen's -n.
const Namespace = "nlx-approval"

// ActorNamespace is the sshsig namespace of ProveKey's challenge, so that a
// proof of key can never be taken for an approval, nor the other way round.
const ActorNamespace = "nlx-actor"

// StatementVersion is the version of Statement; Parse refuses any other.
const StatementVersion = 1

// ExpiresLayout is the one form of Statement.ExpiresAt: RFC 3339 in UTC,
// seconds precision, with a "Z".
const ExpiresLayout = "2006-01-02T15:04:05Z"

// maxSize caps every input: a statement, a signature, a key file.
const maxSize = 64 << 10

var (
	rePlanHash = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	reAddress  = regexp.MustCompile(`^[a-z]{1,32}\.[a-z][a-z0-9-]{0,62}$`)
	// A risk code names files (FileName), so it is held to a safe shape;
	// whether it is one of plan's codes is the caller's check against the
	// plan.
	reRisk  = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	reActor = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
)

// Errors callers branch on (to choose a reason code): every error Parse,
// and so ReadDir, returns for bad input wraps one of them.
var (
	// ErrInvalidStatement: the statement's bytes do not decode, are not in
	// the canonical form Message gives, or fail Check.
	ErrInvalidStatement = errors.New("invalid approval statement")
	// ErrInvalidSignature: the signature does not unarmor or parse, is under
	// another namespace, uses a key nlx refuses, or does not verify.
	ErrInvalidSignature = errors.New("invalid approval signature")
)

// Statement is what a reviewer signs: one risk of one change of one plan.
// Its signed form is Message.
type Statement struct {
	Version   int           `json:"version"`    // StatementVersion
	PlanHash  string        `json:"plan_hash"`  // "sha256:<64 hex>"
	Address   string        `json:"address"`    // kind.name, e.g. workspace.alpha
	Risk      plan.RiskCode `json:"risk"`       // the risk approved
	Actor     string        `json:"actor"`      // the reviewer, as named in the applied state
	Reason    string        `json:"reason"`     // why, for people
	ExpiresAt string        `json:"expires_at"` // ExpiresLayout: "2026-12-02T10:00:00Z"
}

// Message returns the exact bytes a reviewer signs: the statement as compact
// JSON, its keys in the struct's order, then "\n". HTML characters are not
// escaped (a reason "a -> b" reads as written in the file the reviewer
// signs). The same statement always gives the same bytes, and Parse accepts
// no other bytes for it.
func (s Statement) Message() []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	// Cannot fail: the statement holds only strings and an int.
	_ = enc.Encode(s)
	return b.Bytes()
}

// Expires returns when the approval expires. It accepts only ExpiresLayout,
// the form Check requires.
func (s Statement) Expires() (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s.ExpiresAt)
	if err != nil {
		return time.Time{}, fmt.Errorf("expires_at %q is not RFC 3339 (like 2026-12-02T10:00:00Z): %w", s.ExpiresAt, err)
	}
	if t.UTC().Format(ExpiresLayout) != s.ExpiresAt {
		return time.Time{}, fmt.Errorf("expires_at %q is not in UTC with seconds precision and a Z (like %s)", s.ExpiresAt, t.UTC().Format(ExpiresLayout))
	}
	return t, nil
}

// Check reports every way s is malformed, in one error: the version, the
// plan hash's shape, the address's kind.name shape, the risk code's shape,
// the actor's name, a reason that is empty or not UTF-8, and the expiry's
// form. It does not compare the expiry with the clock.
func (s Statement) Check() error {
	var errs []error
	if s.Version != StatementVersion {
		errs = append(errs, fmt.Errorf("version %d: nlx reads approval statements of version %d only", s.Version, StatementVersion))
	}
	if !rePlanHash.MatchString(s.PlanHash) {
		errs = append(errs, fmt.Errorf("plan_hash %q is not sha256:<64 lowercase hex>", s.PlanHash))
	}
	if !reAddress.MatchString(s.Address) {
		errs = append(errs, fmt.Errorf("address %q is not kind.name (like workspace.alpha)", s.Address))
	}
	switch {
	case s.Risk == "":
		errs = append(errs, errors.New("risk is empty"))
	case !reRisk.MatchString(string(s.Risk)):
		errs = append(errs, fmt.Errorf("risk %q is not a risk code (lowercase letters, digits and _)", s.Risk))
	}
	if !reActor.MatchString(s.Actor) {
		errs = append(errs, fmt.Errorf("actor %q is not a name matching ^[a-z][a-z0-9-]{0,62}$", s.Actor))
	}
	switch {
	case !utf8.ValidString(s.Reason):
		// JSON would carry it as U+FFFD: the signed bytes would not say
		// what the statement does.
		errs = append(errs, fmt.Errorf("reason %q is not valid UTF-8", s.Reason))
	case strings.TrimSpace(s.Reason) == "":
		errs = append(errs, errors.New("reason is empty"))
	}
	if _, err := s.Expires(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// FileName is the name of the file that holds s's message:
// "<first 12 hex of the plan hash>.<address>.<risk>.<actor>.json" (two
// reviewers of one risk never share a file). The signature
// beside it has the same name with ".sig" added. Only a statement that
// passes Check gives a name safe to join to a directory.
func FileName(s Statement) string {
	h := strings.TrimPrefix(s.PlanHash, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h + "." + s.Address + "." + string(s.Risk) + "." + s.Actor + ".json"
}
