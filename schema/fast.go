package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// The fast path.
//
// Unifying a large config with #Config costs CUE about twice the evaluation
// of the config itself. Most configs are plain data, so Load first evaluates
// the user's package alone, exports it to JSON and checks that JSON against
// the rules below, which mirror schema.cue. A check that is not certain
// declines, and Load then does the full CUE unification, which stays the
// authority for every verdict and every error message. Soundness rule: a
// value accepted here must be accepted by #Config with the same result
// (TestFastPathAgreesWithCUE and FuzzFastPath hold the two together).

var (
	reName      = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	reAbsPath   = regexp.MustCompile(`^/`)
	reSecretRef = regexp.MustCompile(`^(env:[A-Za-z_][A-Za-z0-9_]*|file:.+|keychain:.+)$`)
	reEnvUpper  = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
	reEnvAny    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	reOCILayout = regexp.MustCompile(`^oci-layout:.+$`)
	reDigestRef = regexp.MustCompile(`@sha256:[0-9a-f]{64}$`)
	reMemory    = regexp.MustCompile(`^[0-9]+(Ki|Mi|Gi)?$`)
	reEndpoint  = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?([.][a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*|[0-9]{1,3}([.][0-9]{1,3}){3}|\[[0-9a-f:.]+\]):[0-9]{1,5}$`)
	reCredHome  = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)
	reDotPart   = regexp.MustCompile(`(^|/)[.][.]?(/|$)`) // a . or .. component
	reSemver    = regexp.MustCompile(`^v?[0-9]+\.[0-9]+\.[0-9]+([-+].*)?$`)
	reEvery     = regexp.MustCompile(`^([0-9]+(ms|s|m|h))+$`)
	reAt        = regexp.MustCompile(`^[0-9]{4}-[0-9]{2}-[0-9]{2}T`)
	reSHA256    = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	reImageRef  = regexp.MustCompile(`^[^ ]+[:@][^ ]+$`)
	reRegistry  = regexp.MustCompile(`^[^ @:]+(:[0-9]+)?(/[^ @:]+)+$`)
	reUnixUser  = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	// A tool's url: the host's loopback over plain HTTP, or a Unix socket.
	reToolURL = regexp.MustCompile(`^(http://(127\.0\.0\.1|\[::1\]|localhost)(:[0-9]{1,5})?(/[^ ]*)?|unix:///[^ ]+)$`)
	// An authorized_keys line without options, as #Identity has it.
	reAuthorizedKey = regexp.MustCompile(`^(ssh-ed25519|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521|ssh-rsa|sk-ssh-ed25519@openssh.com|sk-ecdsa-sha2-nistp256@openssh.com) [A-Za-z0-9+/]+=*( [^\n]*)?$`)
	// The #RecordKind disjunction.
	reRecordKind = regexp.MustCompile(`^(` + strings.Join(RecordKinds, "|") + `)$`)
)

// rule checks one JSON value (decoded with UseNumber) and reports false when
// it is not certain that #Config accepts it.
type rule func(v any) bool

type field struct {
	name     string
	required bool
	rule     rule
}

func req(name string, r rule) field { return field{name, true, r} }
func opt(name string, r rule) field { return field{name, false, r} }

// object is a closed struct: only the listed fields, required ones present.
// A field with a default in schema.cue is opt here: absent means default.
func object(fields ...field) rule {
	return func(v any) bool {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		seen := 0
		for _, f := range fields {
			x, ok := m[f.name]
			if !ok {
				if f.required {
					return false
				}
				continue
			}
			seen++
			if !f.rule(x) {
				return false
			}
		}
		return seen == len(m)
	}
}

// mapOf is a struct with a pattern constraint on every label.
func mapOf(key *regexp.Regexp, elem rule) rule {
	return func(v any) bool {
		m, ok := v.(map[string]any)
		if !ok {
			return false
		}
		for k, x := range m {
			if key != nil && !key.MatchString(k) {
				return false
			}
			if !elem(x) {
				return false
			}
		}
		return true
	}
}

// listOf is a list of at least min elements.
func listOf(min int, elem rule) rule {
	return func(v any) bool {
		l, ok := v.([]any)
		if !ok || len(l) < min {
			return false
		}
		for _, x := range l {
			if !elem(x) {
				return false
			}
		}
		return true
	}
}

// all is a conjunction; later rules may assume earlier ones held.
func all(rules ...rule) rule {
	return func(v any) bool {
		for _, r := range rules {
			if !r(v) {
				return false
			}
		}
		return true
	}
}

// exactlyOne is matchN(1, [{a!: _}, {b!: _}, ...]) over an object.
func exactlyOne(fields ...string) rule {
	return func(v any) bool {
		m := v.(map[string]any)
		n := 0
		for _, f := range fields {
			if _, ok := m[f]; ok {
				n++
			}
		}
		return n == 1
	}
}

func str(v any) bool { _, ok := v.(string); return ok }

func nonEmpty(v any) bool { s, ok := v.(string); return ok && s != "" }

func boolean(v any) bool { _, ok := v.(bool); return ok }

func match(res ...*regexp.Regexp) rule {
	return func(v any) bool {
		s, ok := v.(string)
		if !ok {
			return false
		}
		for _, re := range res {
			if re.MatchString(s) {
				return true
			}
		}
		return false
	}
}

func both(a, b rule) rule { return func(v any) bool { return a(v) && b(v) } }

// not holds for a string r does not hold for; a value that is no string
// fails both.
func not(r rule) rule {
	return func(v any) bool {
		_, ok := v.(string)
		return ok && !r(v)
	}
}

func enum(vals ...string) rule {
	return func(v any) bool {
		s, ok := v.(string)
		if !ok {
			return false
		}
		for _, x := range vals {
			if s == x {
				return true
			}
		}
		return false
	}
}

// integer accepts an integer literal in [min, max].
func integer(min, max int64) rule {
	return func(v any) bool {
		n, ok := v.(json.Number)
		if !ok || strings.ContainsAny(string(n), ".eE") {
			return false
		}
		i, err := strconv.ParseInt(string(n), 10, 64)
		return err == nil && i >= min && i <= max
	}
}

// number accepts any number in (min, max].
func number(minExclusive, max float64) rule {
	return func(v any) bool {
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		f, err := n.Float64()
		return err == nil && f > minExclusive && f <= max
	}
}

var (
	name      = match(reName)
	absPath   = match(reAbsPath)
	policy    = enum("read_only", "workspace_write", "trusted_local", "danger_full_access")
	stringMap = mapOf(nil, str)
)

var configRule = object(
	opt("host", object(
		opt("operators", listOf(0, name)),
		opt("twoPersonRule", boolean),
		opt("retention", object(opt("days", integer(1, 36500)))),
		opt("actors", mapOf(reName, object(
			opt("unix", match(reUnixUser)),
			opt("keys", listOf(0, match(reAuthorizedKey))),
		))),
	)),
	opt("providers", mapOf(reName, object(
		req("kind", enum("codex-app-server", "claude-code", "opencode", "acp")),
		opt("status", enum("disabled", "enabled")),
		req("version", str),
		req("command", listOf(1, str)),
		opt("capabilities", listOf(0, str)),
		opt("feature", str),
		opt("env", mapOf(reEnvUpper, str)),
		opt("inference", listOf(0, match(reEndpoint))),
	))),
	opt("images", mapOf(reName, all(object(
		opt("ref", match(reImageRef)),
		opt("platforms", listOf(1, enum("linux/arm64", "linux/amd64"))),
		opt("base", func(v any) bool { return enum("scratch")(v) || match(reOCILayout, reDigestRef)(v) }),
		opt("layers", listOf(0, all(
			object(opt("files", str), opt("go", str), opt("skills", listOf(1, name)), opt("nlx", object()), req("dest", absPath)),
			exactlyOne("files", "go", "skills", "nlx"),
		))),
		opt("entrypoint", listOf(0, str)),
		opt("cmd", listOf(0, str)),
		opt("env", mapOf(reEnvAny, str)),
		opt("workdir", absPath),
		opt("user", str),
		opt("labels", stringMap),
		opt("output", str),
		opt("registry", match(reRegistry)),
	), func(v any) bool { // a build unless a ref
		m := v.(map[string]any)
		_, ref := m["ref"]
		_, p := m["platforms"]
		_, b := m["base"]
		_, l := m["layers"]
		return ref != (p || b || l) && (ref || (p && b && l))
	}))),
	opt("tools", mapOf(reName, all(object(
		opt("command", listOf(1, str)),
		opt("url", match(reToolURL)),
		opt("endpoint", absPath),
		opt("env", mapOf(reEnvUpper, str)),
		opt("secrets", mapOf(reEnvUpper, match(reSecretRef))),
		opt("egress", enum("none", "full")),
		req("scope", enum("team", "personal")),
		req("owner", name),
	), exactlyOne("command", "url"), func(v any) bool { // what goes with a url
		m := v.(map[string]any)
		url, ok := m["url"].(string)
		_, env := m["env"]
		_, secrets := m["secrets"]
		_, endpoint := m["endpoint"]
		if !ok {
			return !endpoint
		}
		return !env && !secrets && m["egress"] != "full" && (!endpoint || strings.HasPrefix(url, "unix:"))
	}))),
	opt("workspaces", mapOf(reName, object(
		req("team", name),
		req("kind", enum("team", "personal")),
		opt("owner", name),
		opt("image", name),
		req("policy", policy),
		req("chatReset", enum("never", "manual", "per_run")),
		req("members", mapOf(reName, enum("admin", "member"))),
		req("limits", object(
			req("memory", match(reMemory)),
			req("cpu", number(0, 1024)),
			req("pids", integer(1, 1048576)),
		)),
		opt("skills", listOf(0, name)),
		opt("tools", listOf(0, name)),
		req("network", object(req("egress", enum("none", "inference", "full")))),
		opt("idleRelease", match(reEvery)),
	))),
	opt("connections", mapOf(reName, object(
		req("owner", name),
		req("scope", enum("personal", "team")),
		req("workspace", name),
		req("provider", name),
		req("billing", enum("subscription", "api")),
		req("credentialHome", both(match(reCredHome), not(match(reDotPart)))),
		opt("secret", match(reSecretRef)),
		req("generation", integer(1, 1<<62)),
	))),
	opt("skills", mapOf(reName, object(
		req("path", str),
		req("version", match(reSemver)),
		req("scope", enum("team", "personal")),
		req("owner", name),
	))),
	opt("jobs", mapOf(reName, object(
		req("workspace", name),
		req("connection", name),
		req("schedule", all(
			object(opt("cron", str), opt("timezone", str), opt("every", match(reEvery)), opt("at", match(reAt))),
			exactlyOne("cron", "every", "at"),
			func(v any) bool { // timezone if and only if cron
				m := v.(map[string]any)
				_, cron := m["cron"]
				_, tz := m["timezone"]
				return cron == tz
			},
		)),
		opt("conversation", str),
		req("prompt", nonEmpty),
		opt("skill", name),
		opt("policy", policy),
		opt("provider", name),
		opt("billing", enum("subscription", "api")),
		opt("fallbackConnection", name),
		opt("enabled", boolean),
		opt("backgroundAuthority", boolean),
		opt("concurrency", enum("skip", "queue")),
		opt("catchUp", enum("skip", "latest")),
	))),
	opt("preservations", mapOf(reName, object(
		req("source", object(req("kind", enum("openclaw")), req("path", absPath), opt("lockDir", absPath))),
		req("workspace", name),
		req("connection", name),
		opt("agents", mapOf(nil, object(req("workspace", name), req("connection", name)))),
		opt("timezone", str),
		req("export", absPath),
		req("expected", object(
			req("counts", mapOf(reRecordKind, integer(0, 1<<62))),
			opt("hashes", mapOf(reRecordKind, match(reSHA256))),
		)),
		req("chatReset", mapOf(reName, enum("preserve", "reset"))),
	))),
)

// fastCheck reports whether the exported JSON of a plain evaluation is
// certainly accepted by #Config.
func fastCheck(data []byte) (bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return false, fmt.Errorf("decode exported config: %w", err)
	}
	return configRule(v), nil
}
