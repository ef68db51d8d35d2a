package images

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"

	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/schema"
)

// smallImage builds a quick two-platform image whose content depends on
// text.
func smallImage(t *testing.T, text string) *Result {
	t.Helper()
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "root", "etc"), 0o755)
	os.WriteFile(filepath.Join(dir, "root", "etc", "motd"), []byte(text), 0o644)
	im := &schema.Image{Platforms: []string{"linux/arm64", "linux/amd64"}, Base: "scratch", Layers: []schema.Layer{{Files: "root", Dest: "/"}}}
	res, err := Build(context.Background(), Input{Name: "small", Image: im, ConfigDir: dir, Cache: &Cache{Dir: filepath.Join(dir, "cache")}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// roundTrip pushes, pulls and checks availability against a registry at
// host (host:port).
func roundTrip(t *testing.T, host string) {
	ctx := context.Background()
	first := smallImage(t, "first\n")
	ref := host + "/nlx/small:v1"
	d, err := Push(ctx, first.Index, ref, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d != first.Digest {
		t.Fatalf("push returned %s, want %s", d, first.Digest)
	}
	pulled, err := Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if pd, _ := pulled.Digest(); pd != first.Digest {
		t.Fatalf("pulled %s, want %s", pd, first.Digest)
	}
	if err := complete(pulled); err != nil {
		t.Fatalf("the pulled index is not whole: %v", err)
	}

	// Apply finds a built image in its registry when the store lacks it.
	empty := &Checker{Store: &Store{Dir: t.TempDir()}}
	if err := empty.Available(ctx, "small", plan.ImagePin{Digest: first.Digest.String(), Registry: host + "/nlx/small"}); err != nil {
		t.Errorf("image in the registry: %v", err)
	}
	missing := smallImage(t, "never pushed\n")
	err = empty.Available(ctx, "small", plan.ImagePin{Digest: missing.Digest.String(), Registry: host + "/nlx/small"})
	if code(err) != reason.ImageNotAvailable {
		t.Errorf("unpushed digest: got %v, want %s", err, reason.ImageNotAvailable)
	}

	// A prebuilt image planned at a tag is refused once the tag moved.
	pin := plan.ImagePin{Digest: first.Digest.String(), Ref: ref}
	if err := empty.Available(ctx, "small", pin); err != nil {
		t.Errorf("tag where it was planned: %v", err)
	}
	second := smallImage(t, "second\n")
	if _, err := Push(ctx, second.Index, ref, nil); err != nil {
		t.Fatal(err)
	}
	if err := empty.Available(ctx, "small", pin); code(err) != reason.ImageRefMoved {
		t.Errorf("moved tag: got %v, want %s", err, reason.ImageRefMoved)
	}
	if now, err := Resolve(ctx, ref); err != nil || now != second.Digest {
		t.Errorf("resolve after the move: %s %v", now, err)
	}

	// A reference by digest pins that digest: a plan pinning another one
	// (a hand-edited pin) is refused, whatever the store holds.
	byDigest := repository(ref) + "@" + first.Digest.String()
	if err := empty.Available(ctx, "small", plan.ImagePin{Digest: first.Digest.String(), Ref: byDigest}); err != nil {
		t.Errorf("digest reference pinned to its digest: %v", err)
	}
	if err := empty.Available(ctx, "small", plan.ImagePin{Digest: second.Digest.String(), Ref: byDigest}); code(err) != reason.ImageRefMoved {
		t.Errorf("digest reference pinned to another digest: got %v, want %s", err, reason.ImageRefMoved)
	}
}

func code(err error) reason.Code {
	var r *reason.Error
	if errors.As(err, &r) {
		return r.Code
	}
	return reason.Code(fmt.Sprint(err))
}

func TestRegistryInProcess(t *testing.T) {
	srv := httptest.NewServer(registry.New())
	defer srv.Close()
	roundTrip(t, strings.TrimPrefix(srv.URL, "http://"))
}

// TestRegistryDockerDistribution runs the same round trip through a real
// registry: Debian's docker-registry (distribution) on 127.0.0.1.
func TestRegistryDockerDistribution(t *testing.T) {
	roundTrip(t, testtool.Registry(t))
}
