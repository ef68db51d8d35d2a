package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/approval"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
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

// proveActor proves that the caller (its OS user, or --key) is actor, a
// name the command's --actor gave, in the applied state.
func proveActor(ctx context.Context, st authority, actor, keyPath string) error {
	if !schema.ValidName(actor) {
		return reason.New(reason.InvalidUsage, "--actor %q is not an actor name", actor)
	}
	_, err := actingActor(ctx, st, actor, keyPath)
	return err
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

func newWhoamiCmd(a *app) *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "whoami [--key KEY]",
		Short: "Say which actor this OS user (or --key) proves in the applied state",
		Long: `Whoami reads host.actors from the applied state and says who the caller is:
the OS user of this process (from its credentials), the key --key proves it
holds, and the actor each proves, if any. A command acting for an actor is
accepted only for an actor named here.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			return a.readState(ctx, func(db *state.DB) error {
				auth, err := db.Authority(ctx)
				if err != nil {
					return err
				}
				c, err := callerOf(key)
				if err != nil {
					return err
				}
				byUnix, byKey := auth.UnixActor(c.User), auth.KeyActor(c.Key)
				doc := map[string]any{"uid": c.UID, "user": c.User, "key": c.Key, "unix_actor": byUnix, "key_actor": byKey}
				return a.view.Render(document{Version: versionWhoami, JSON: doc, Text: func(w io.Writer) error {
					fmt.Fprintf(w, "This is %s.\n", c)
					switch {
					case byUnix != "":
						fmt.Fprintf(w, "OS user %s proves actor %s (unix:%s).\n", c.User, byUnix, c.User)
					default:
						fmt.Fprintf(w, "OS user %s proves no actor in the applied state.\n", orNone(c.User))
					}
					if c.Key != "" {
						if byKey != "" {
							fmt.Fprintf(w, "Key %s proves actor %s (key:%s).\n", c.Key, byKey, c.Key)
						} else {
							fmt.Fprintf(w, "Key %s is no actor's in the applied state.\n", c.Key)
						}
					}
					return nil
				}})
			})
		},
	}
	keyFlag(cmd, &key)
	return cmd
}
