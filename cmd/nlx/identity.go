package main

import (
	"context"
	"os"
	"os/user"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/approval"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
)

// keyFlag adds --key to a command that acts for an actor: the private key
// (or, with ssh-agent, its .pub) whose signature proves the actor.
func keyFlag(cmd *cobra.Command, key *string) {
	cmd.Flags().StringVar(key, "key", "", "prove the actor with this SSH private `KEY` (one of the actor's keys in host.actors); default: the calling OS user proves it")
}

// callerOf is who runs this process: its real uid and that uid's name
// (from the process's credentials and the user database, never from the
// environment) and, with a key, the fingerprint of the key it proved it
// holds by signing a fresh challenge with it.
func callerOf(keyPath string) (reconcile.Caller, error) {
	uid := os.Getuid()
	c := reconcile.Caller{UID: uid}
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		c.User = u.Username
	}
	if keyPath == "" {
		return c, nil
	}
	signer, err := approval.LoadSigner(keyPath)
	if err != nil {
		return c, reason.Wrap(reason.InvalidUsage, err, "--key %s", keyPath)
	}
	fp, err := approval.ProveKey(signer)
	if err != nil {
		return c, reason.Wrap(reason.ActorUnproven, err, "--key %s", keyPath)
	}
	c.Key = fp
	return c, nil
}

// authority is the part of the state that says who may act.
type authority interface {
	Authority(ctx context.Context) (*reconcile.Authority, error)
}

// proveActor proves that the caller (its OS user, or --key) is actor in
// the applied state, and returns how (unix:USER or key:FINGERPRINT).
func proveActor(ctx context.Context, st authority, actor, keyPath string) (string, error) {
	if !schema.ValidName(actor) {
		return "", reason.New(reason.InvalidUsage, "--actor %q is not an actor name", actor)
	}
	auth, err := st.Authority(ctx)
	if err != nil {
		return "", err
	}
	c, err := callerOf(keyPath)
	if err != nil {
		return "", err
	}
	return auth.Prove(actor, c)
}

// actorFor names the actor a command runs for when --actor is not given:
// the actor of the key given (--key), else $NLX_ACTOR, else the actor the
// caller's OS user proves, else the OS user's name. The name alone proves
// nothing.
func actorFor(flag string, auth *reconcile.Authority, c reconcile.Caller) string {
	if flag != "" {
		return flag
	}
	if a := auth.KeyActor(c.Key); a != "" {
		return a
	}
	if v := os.Getenv("NLX_ACTOR"); v != "" {
		return v
	}
	if a := auth.UnixActor(c.User); a != "" {
		return a
	}
	if c.User != "" {
		return c.User
	}
	return "unknown"
}

// actingActor is the actor a command that acts for one runs for (--actor,
// else as actorFor names it), proven against the applied state.
func actingActor(ctx context.Context, st authority, flag, keyPath string) (string, error) {
	auth, err := st.Authority(ctx)
	if err != nil {
		return "", err
	}
	c, err := callerOf(keyPath)
	if err != nil {
		return "", err
	}
	actor := actorFor(flag, auth, c)
	if !schema.ValidName(actor) {
		return "", reason.New(reason.InvalidUsage, "actor %q is not an actor name (--actor)", actor)
	}
	if _, err := auth.Prove(actor, c); err != nil {
		return "", err
	}
	return actor, nil
}
