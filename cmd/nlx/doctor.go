package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/nlx-dev/nlx/host"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
	"github.com/nlx-dev/nlx/launch"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/state"
	"github.com/spf13/cobra"
)

func newDoctorCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Report what this host can enforce for provider processes",
		Long: `Doctor checks namespaces, bubblewrap and runc (present and working), the
cgroup mode and its memory, pids and cpu controllers, and the architecture,
and says how to fix each gap. It exits 0 only when a provider can be
launched safely. It also tries the path of egress inference (a proxy, a
sandbox, the bridge on its loopback, the proxy's refusal back): only
workspaces with egress inference need it, so it does not change the exit
status.

It then lists the applied connections (read from the state, read-only)
whose credential home is missing, empty (the provider is not signed in),
unsafe or unreadable, with the command that signs the provider in
(CODEX_HOME=HOME codex login, CLAUDE_CONFIG_DIR=HOME claude). These are
reported, not gaps of the host: they never change the exit status.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			r := isolate.Doctor(cmd.Context())
			user := providerUserFinding()
			r.Findings = append(r.Findings, user, egressFinding(cmd.Context()))
			homes, homesErr := a.credentialHomes(cmd.Context())
			doc := map[string]any{"can_launch": r.CanLaunch(), "report": r, "credential_homes": homes}
			if homesErr != nil {
				doc["credential_homes_error"] = homesErr.Error()
			}
			if err := a.view.Render(document{
				Version: versionDoctor,
				JSON:    doc,
				Text: func(w io.Writer) error {
					if err := printDoctor(w, r, user.OK); err != nil {
						return err
					}
					return printHomes(w, homes, homesErr)
				},
			}); err != nil {
				return err
			}
			if !r.CanLaunch() || !user.OK {
				return reason.New(reason.CannotLaunch, "this host cannot launch a provider safely; fix the gaps above")
			}
			return nil
		},
	}
	return cmd
}

func printDoctor(w io.Writer, r isolate.Report, userOK bool) error {
	fmt.Fprintf(w, "architecture %s, kernel %s, cgroups %s\n\n", r.Arch, r.Kernel, r.CgroupMode)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range r.Findings {
		mark := "ok"
		if !f.OK {
			mark = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, f.Name, f.Detail)
		if !f.OK && f.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", f.Fix)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if r.CanLaunch() && userOK {
		fmt.Fprintln(w, "\nA provider can be launched safely on this host.")
	}
	return nil
}

// providerUserFinding reports who providers run as (last of the findings).
// egressFinding tries the path of egress inference: a proxy, a sandbox,
// the bridge in it, the proxy's refusal back. Only workspaces with egress
// inference need it: it does not decide whether the host can launch.
func egressFinding(ctx context.Context) isolate.Finding {
	f := isolate.Finding{Name: "egress.bridge"}
	var user *isolate.User
	if os.Geteuid() == 0 {
		user = &isolate.User{UID: 65534, GID: 65534} // nobody, while the provider user does not exist
		if o, err := host.FindProviderUser(); err == nil && o != nil {
			user = &isolate.User{UID: o.UID, GID: o.GID}
		}
	}
	if err := launch.CheckEgress(ctx, isolate.Auto, user); err != nil {
		f.Detail = err.Error()
		f.Fix = "workspaces with egress inference cannot launch until the proxy and its bridge run here: keep nlx's executable where the provider user can reach it, and fix the gaps above"
		return f
	}
	f.OK, f.Detail = true, "a sandbox with egress inference reaches its proxy through the bridge on its loopback (and is refused a host no list names)"
	return f
}

func providerUserFinding() isolate.Finding {
	f := isolate.Finding{Name: "provider.user"}
	if os.Geteuid() != 0 {
		f.OK, f.Detail = true, fmt.Sprintf("nlx is not root: providers run as its own user (uid %d)", os.Geteuid())
		return f
	}
	o, err := host.FindProviderUser()
	switch {
	case err != nil:
		f.Detail = err.Error()
		f.Fix = "create it (useradd --system --user-group --no-create-home --shell /usr/sbin/nologin NAME) or set NLX_PROVIDER_USER to a user (or UID:GID) that is not root"
	case o == nil:
		f.OK, f.Detail = true, host.DefaultProviderUser+" does not exist yet: nlx creates it at the first launch or apply"
	default:
		f.OK, f.Detail = true, fmt.Sprintf("providers run as %s (uid %d, gid %d)", o.Name, o.UID, o.GID)
	}
	return f
}

// credentialHomes lists the applied connections whose credential home
// needs an operator (launch.Homes), from the state read read-only; none
// where there is no state. An error reading the state is reported beside
// the host's findings, never instead of them.
func (a *app) credentialHomes(ctx context.Context) ([]launch.Home, error) {
	homes := []launch.Home{}
	statePath, err := a.resolveState()
	if err != nil {
		return homes, err
	}
	var snap *reconcile.Snapshot
	err = a.readState(ctx, func(db *state.DB) error {
		var err error
		snap, err = db.Snapshot(ctx)
		return err
	})
	if errors.Is(err, state.ErrNoState) {
		return homes, nil
	}
	if err != nil {
		return homes, err
	}
	paths, err := launch.HostFor(statePath)
	if err != nil {
		return homes, err
	}
	owner := ""
	if os.Geteuid() == 0 {
		owner = host.ProviderUserName()
		if o, err := host.FindProviderUser(); err == nil && o != nil {
			owner = fmt.Sprintf("%d:%d", o.UID, o.GID)
		} else if !strings.Contains(owner, ":") {
			owner += ":" // the user's own group
		}
	}
	if hs := launch.Homes(snap.Resources, paths.CredentialRoot, owner); hs != nil {
		homes = hs
	}
	return homes, nil
}

// printHomes lists the credential homes that need an operator.
func printHomes(w io.Writer, homes []launch.Home, err error) error {
	if err != nil {
		_, err = fmt.Fprintf(w, "\nCredential homes not checked: %v\n", err)
		return err
	}
	if len(homes) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nCredential homes to attend to (reported only; they do not change doctor's exit status):\n")
	for _, h := range homes {
		what := map[host.HomeState]string{
			host.HomeMissing: "missing: launches are refused (credential_home_missing)",
			host.HomeEmpty:   "empty: not signed in",
			host.HomeUnsafe:  "unsafe: launches are refused (credential_home_unsafe)",
			host.HomeUnread:  "nlx could not read it",
		}[h.State]
		fmt.Fprintf(w, "  %s (provider %s) %s: %s\n", h.Connection, h.Provider, h.Dir, what)
		if h.Detail != "" {
			fmt.Fprintf(w, "      %s\n", h.Detail)
		}
		if h.Create != "" {
			fmt.Fprintf(w, "      create: %s\n", h.Create)
		}
		if h.SignIn != "" {
			fmt.Fprintf(w, "      sign in: %s\n", h.SignIn)
			if h.SignInThen != "" {
				fmt.Fprintf(w, "      (in it: %s)\n", h.SignInThen)
			}
		} else if h.State == host.HomeMissing || h.State == host.HomeEmpty {
			fmt.Fprintf(w, "      sign in: with %s's own sign-in, its home at %s\n", h.Kind, h.Dir)
		}
	}
	return nil
}
