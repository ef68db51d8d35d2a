package main

import (
	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/spf13/cobra"
)

func newImageUnpackCmd(a *app) *cobra.Command {
	var platform string
	cmd := &cobra.Command{
		Use:   "unpack REF|DIR DEST --platform linux/arm64",
		Short: "Write a platform's root file system, refusing hostile layers",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := images.ParsePlatform(platform)
			if err != nil {
				return reason.Wrap(reason.InvalidUsage, err, "--platform")
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
			return a.say(versionImageUnpack, map[string]any{"image": args[0], "platform": p.String(), "rootfs": args[1]},
				"Unpacked %s for %s into %s.", args[0], p, args[1])
		},
	}
	cmd.Flags().StringVar(&platform, "platform", "linux/arm64", "platform to unpack")
	return cmd
}
