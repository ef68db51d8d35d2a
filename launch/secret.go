package launch

import (
	"io"
	"os"
	"strings"

	"github.com/nlx-dev/nlx/internal/reason"
)

// maxSecret bounds a secret file: a key, not a document.
const maxSecret = 64 << 10

// Secret resolves a connection's secret reference at launch: env:NAME from
// env (nlx's own environment, NAME=VALUE entries), file:PATH from that
// file (its trailing newline dropped). The value is never written to the
// state, a log or an event; errors name the reference, never the value.
func Secret(ref string, env []string) (string, error) {
	kind, rest, _ := strings.Cut(ref, ":")
	switch kind {
	case "env":
		for i := len(env) - 1; i >= 0; i-- {
			if v, ok := strings.CutPrefix(env[i], rest+"="); ok && v != "" {
				return v, nil
			}
		}
		return "", reason.New(reason.SecretUnavailable, "secret %s: $%s is not set in nlx's environment", ref, rest)
	case "file":
		f, err := os.Open(rest)
		if err != nil {
			return "", reason.New(reason.SecretUnavailable, "secret %s: %v", ref, err)
		}
		defer f.Close()
		buf, err := io.ReadAll(io.LimitReader(f, maxSecret+1))
		if err != nil {
			return "", reason.New(reason.SecretUnavailable, "secret %s: %v", ref, err)
		}
		if len(buf) > maxSecret {
			return "", reason.New(reason.SecretUnavailable, "secret %s: the file is over %d bytes", ref, maxSecret)
		}
		v := strings.TrimRight(string(buf), "\r\n")
		if v == "" {
			return "", reason.New(reason.SecretUnavailable, "secret %s: the file is empty", ref)
		}
		return v, nil
	default:
		return "", reason.New(reason.SecretUnavailable, "secret %s: this host reads env: and file: references only", ref)
	}
}
