package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/nlx-dev/nlx/images"
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

func newImageUnpackCmd(a *app) *cobra.Command {
	var platform string
	cmd := &cobra.Command{
		Use:   "unpack REF|DIR DEST --platform linux/arm64",
		Short: "Write a platform's root file system, refusing hostile layers",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := images.ParsePlatform(platform)
			if err != nil {
				return err
			}
			idx, err := loadIndex(cmd.Context(), a, args[0])
			if err != nil {
				return err
			}
			img, err := images.PlatformImage(idx, p)
			if err != nil {
				return err
			}
			if err := images.Unpack(cmd.Context(), img, args[1]); err != nil {
				return err
			}
			fmt.Fprintf(a.io.Out, "Unpacked %s for %s into %s.\n", args[0], p, args[1])
			return nil
		},
	}
	cmd.Flags().StringVar(&platform, "platform", "linux/arm64", "platform to unpack")
	return cmd
}
