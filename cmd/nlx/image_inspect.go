package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/nlx-dev/nlx/images"
	"github.com/spf13/cobra"
)

func newImageInspectCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect REF|DIR",
		Short: "Show an image index: platforms, layer digests and sizes",
		Long: `Inspect reads an index from an OCI layout directory, the image store (by
name or digest) or a registry, and prints its digest, each platform's
manifest and config, and every layer with its digest and size.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			idx, err := loadIndex(cmd.Context(), a, args[0])
			if err != nil {
				return err
			}
			info, err := images.Inspect(idx)
			if err != nil {
				return err
			}
			return a.view.Render(document{Version: versionImageInspect, JSON: info, Text: func(w io.Writer) error {
				fmt.Fprintf(w, "index %s (%s)\n", info.Digest, info.MediaType)
				tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
				for _, p := range info.Platforms {
					fmt.Fprintf(tw, "%s\tmanifest %s\tconfig %s\n", p.Platform, p.Manifest, p.Config)
					for _, l := range p.Layers {
						fmt.Fprintf(tw, "\tlayer %s\t%d bytes\t%s\n", l.Digest, l.Size, l.MediaType)
					}
				}
				return tw.Flush()
			}})
		},
	}
	return cmd
}
