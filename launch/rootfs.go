package launch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/nlx-dev/nlx/images"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/isolate"
)

// ImageRootFS unpacks the image an applied workspace is pinned to, from
// the store, for this host's platform, once per digest, with the mount
// points a launch needs; it returns the root file system's directory.
func ImageRootFS(ctx context.Context, store *images.Store, digest string) (string, error) {
	d, err := v1.NewHash(digest)
	if err != nil {
		return "", reason.New(reason.InvalidAppliedSpec, "image digest %q: %v", digest, err)
	}
	p, err := images.ParsePlatform("linux/" + runtime.GOARCH)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(store.Dir, "rootfs", d.Hex, strings.ReplaceAll(p.String(), "/", "-"))
	if _, err := os.Stat(dir); err == nil {
		// Unpacked by an nlx that may not have made the mount points.
		return dir, isolate.PrepareRootFS(dir)
	}
	idx, err := store.Index(d)
	if err != nil {
		return "", err
	}
	img, err := images.PlatformImage(idx, p)
	if err != nil {
		return "", err
	}
	tmp := dir + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return "", fmt.Errorf("unpack %s: %w", digest, err)
	}
	if err := images.Unpack(ctx, img, tmp); err != nil {
		return "", err
	}
	// The mount points bubblewrap, as the provider's user, cannot make.
	if err := isolate.PrepareRootFS(tmp); err != nil {
		return "", err
	}
	return dir, os.Rename(tmp, dir)
}
