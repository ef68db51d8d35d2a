package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx"
	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

func newImageCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build, push, pull, inspect and unpack native images",
		Long: `Native images are OCI image indexes built reproducibly from the images
entries of a config, kept in the local image store (an OCI layout beside the
state; $NLX_IMAGE_STORE overrides it).`,
	}
	cmd.AddCommand(newImageBuildCmd(a), newImagePushCmd(a), newImagePullCmd(a), newImageInspectCmd(a), newImageUnpackCmd(a))
	return cmd
}

// buildImage builds the images entry name of the config in dir into the
// store (and the image's own output layout, if any).
func buildImage(ctx context.Context, a *app, name, dir string) (*images.Result, error) {
	cfg, err := schema.LoadBudgeted(ctx, dir, schema.DefaultBudget())
	if err != nil {
		return nil, err
	}
	im := cfg.Images[name]
	if im == nil {
		return nil, reason.New(reason.UnknownImage, "the config in %s has no image %q", dir, name)
	}
	if im.Ref != "" {
		return nil, reason.New(reason.UnknownImage, "image %s is prebuilt (%s); pull it instead", name, im.Ref)
	}
	store, epoch, err := a.buildInputs()
	if err != nil {
		return nil, err
	}
	prog := a.newProgress()
	res, err := images.Build(ctx, images.Input{Name: name, Image: im, ConfigDir: dir, Skills: cfg.Skills,
		Cache: store.Cache(), Self: nlx.Source, SelfEmbedded: true, Epoch: epoch, Progress: prog.Step})
	prog.Wait()
	if err != nil {
		return nil, err
	}
	if err := store.Put(res.Index, name); err != nil {
		return nil, err
	}
	if im.Output != "" {
		out := im.Output
		if !filepath.IsAbs(out) {
			out = filepath.Join(dir, out)
		}
		if err := images.WriteLayout(out, res.Index, name); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func newImageBuildCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "build NAME [DIR]",
		Short: "Build an image of the config into the image store; print its digest",
		Long: `Build builds the images entry NAME of the config in DIR (default ".") for
every platform it lists, reproducibly: the same inputs give the same index
digest on any machine (mtimes from SOURCE_DATE_EPOCH, default 0). Unchanged
layers come from the layer cache. Prints the index digest.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 2 {
				dir = args[1]
			}
			res, err := buildImage(cmd.Context(), a, args[0], dir)
			if err != nil {
				return err
			}
			return a.view.Render(document{Version: versionImageBuild, JSON: res, Text: func(w io.Writer) error {
				_, err := fmt.Fprintln(w, res.Digest)
				return err
			}})
		},
	}
	return cmd
}

func newImagePushCmd(a *app) *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "push NAME REF",
		Short: "Build (from the cache) and push an image to a registry, verified by digest",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			res, err := buildImage(ctx, a, args[0], dir)
			if err != nil {
				return err
			}
			prog := a.newProgress()
			updates, done := prog.Push(args[1])
			d, err := images.Push(ctx, res.Index, args[1], updates)
			done()
			prog.Wait()
			if err != nil {
				return err
			}
			return a.say(versionImagePush, map[string]any{"ref": args[1], "digest": d.String()}, "%s@%s", args[1], d)
		},
	}
	cmd.Flags().StringVar(&dir, "config", ".", "config `DIR`")
	return cmd
}

func newImagePullCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "pull REF",
		Short: "Pull an image index from a registry into the image store",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			idx, err := images.Pull(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			store, err := a.imageStore()
			if err != nil {
				return err
			}
			if err := store.Put(idx, args[0]); err != nil {
				return err
			}
			d, err := idx.Digest()
			if err != nil {
				return err
			}
			return a.say(versionImagePull, map[string]any{"digest": d.String()}, "%s", d)
		},
	}
}

// loadIndex finds an index by an OCI layout directory, a name in the
// image store, a digest in it, or a registry reference.
func loadIndex(ctx context.Context, a *app, ref string) (v1.ImageIndex, error) {
	if info, err := os.Stat(filepath.Join(ref, "index.json")); err == nil && !info.IsDir() {
		return images.ReadLayout(ref, "")
	}
	store, err := a.imageStore()
	if err != nil {
		return nil, err
	}
	if d, err := v1.NewHash(ref); err == nil {
		return store.Index(d)
	}
	if names, err := store.Names(); err == nil {
		if d, ok := names[ref]; ok {
			return store.Index(d)
		}
	}
	return images.Pull(ctx, ref)
}
