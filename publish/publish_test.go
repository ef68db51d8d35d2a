package publish_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/nlx-dev/nlx/internal/testtool"
	"github.com/nlx-dev/nlx/publish"
)

const (
	typeA = "application/vnd.nlx.test.a.v1"
	typeB = "application/vnd.nlx.test.b.v1"
	// A layer media type no image tool knows: registries must take it.
	blobType = "application/vnd.nlx.test.blob.v1+json"
)

// reg is a registry under test. api says whether it has the referrers API;
// without it, referrers live in the referrers tag.
type reg struct {
	host string
	api  bool
}

// eachRegistry runs f against ggcr's in-process registry with the
// referrers API, the same without it, and Debian's docker-registry 2.8
// (which has no referrers API).
func eachRegistry(t *testing.T, f func(t *testing.T, r reg)) {
	quiet := registry.Logger(log.New(io.Discard, "", 0))
	cases := []struct {
		name  string
		api   bool
		start func(t *testing.T) string
	}{
		{"inprocess-api", true, func(t *testing.T) string {
			srv := httptest.NewServer(registry.New(quiet, registry.WithReferrersSupport(true)))
			t.Cleanup(srv.Close)
			return strings.TrimPrefix(srv.URL, "http://")
		}},
		{"inprocess-tag", false, func(t *testing.T) string {
			srv := httptest.NewServer(registry.New(quiet))
			t.Cleanup(srv.Close)
			return strings.TrimPrefix(srv.URL, "http://")
		}},
		{"docker-registry", false, func(t *testing.T) string { return testtool.Registry(t) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { f(t, reg{host: c.start(t), api: c.api}) })
	}
}

func TestMain(m *testing.M) {
	// The wait for slow writers elsewhere is long for a test; the
	// mechanism, not its length, is under test (round 1 of
	// TestAttachRepairsLostUpdate).
	publish.SetSettle(20 * time.Millisecond)
	os.Exit(m.Run())
}

func artifact(kind, text string) publish.Artifact {
	return publish.Artifact{
		ArtifactType: kind,
		Blobs: []publish.Blob{
			{MediaType: blobType, Data: []byte(`{"text":"` + text + `"}`), Annotations: map[string]string{"org.opencontainers.image.title": "one.json"}},
			{MediaType: "application/octet-stream", Data: []byte("second " + text)},
		},
		Annotations: map[string]string{"dev.nlx.text": text, "dev.nlx.a": "1"},
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestRoundTrip(t *testing.T) {
	eachRegistry(t, func(t *testing.T, r reg) {
		c := ctx(t)
		repo := r.host + "/nlx/state"
		a := artifact(typeA, "hello")
		d, err := publish.Push(c, repo+":v1", a)
		if err != nil {
			t.Fatal(err)
		}
		if d.MediaType != types.OCIManifestSchema1 || d.ArtifactType != typeA {
			t.Errorf("push descriptor: got %+v", d)
		}

		p, err := publish.Pull(c, repo+":v1", typeA, 1<<10)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p.Descriptor, d) {
			t.Errorf("pulled descriptor: got %+v, want %+v", p.Descriptor, d)
		}
		if want := repo + "@" + d.Digest.String(); p.Ref != want {
			t.Errorf("pulled ref: got %s, want %s", p.Ref, want)
		}
		if !reflect.DeepEqual(p.Blobs, a.Blobs) {
			t.Errorf("blobs: got %+v, want %+v", p.Blobs, a.Blobs)
		}
		if !reflect.DeepEqual(p.Annotations, a.Annotations) || p.Subject != nil {
			t.Errorf("annotations, subject: got %v %v, want %v nil", p.Annotations, p.Subject, a.Annotations)
		}

		// The manifest is shaped as the OCI 1.1 artifact guidance has it.
		raw, err := remote.Get(mustRef(t, repo+":v1"))
		if err != nil {
			t.Fatal(err)
		}
		var m v1.Manifest
		json.Unmarshal(raw.Manifest, &m)
		if m.SchemaVersion != 2 || m.MediaType != types.OCIManifestSchema1 || m.ArtifactType != typeA ||
			m.Config.MediaType != types.OCIEmptyJSON || m.Config.Size != 2 ||
			m.Config.Digest.String() != "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a" {
			t.Errorf("manifest: got %s", raw.Manifest)
		}

		// Deterministic: the same artifact (annotations built in another
		// order) has the same digest, by tag, by digest, and bare.
		b := artifact(typeA, "hello")
		b.Annotations = map[string]string{"dev.nlx.a": "1", "dev.nlx.text": "hello"}
		for _, ref := range []string{repo + ":v2", repo + "@" + d.Digest.String(), repo} {
			again, err := publish.Push(c, ref, b)
			if err != nil {
				t.Fatalf("push %s: %v", ref, err)
			}
			if !reflect.DeepEqual(again, d) {
				t.Errorf("push %s: got %+v, want %+v", ref, again, d)
			}
		}
		if _, err := publish.Push(c, repo+"@sha256:"+strings.Repeat("0", 64), b); err == nil {
			t.Error("push to another artifact's digest: no error")
		}
		if got, err := publish.Resolve(c, repo+":v2"); err != nil || got.Digest != d.Digest {
			t.Errorf("resolve v2: got %v %v, want %s", got.Digest, err, d.Digest)
		}
		// A bare push tags nothing: ":latest" does not exist.
		if _, err := publish.Resolve(c, repo+":latest"); !errors.Is(err, publish.ErrNotFound) {
			t.Errorf("latest after a bare push: got %v, want ErrNotFound", err)
		}
	})
}

func TestPullRefuses(t *testing.T) {
	eachRegistry(t, func(t *testing.T, r reg) {
		c := ctx(t)
		repo := r.host + "/nlx/plan"
		if _, err := publish.Push(c, repo+":v1", artifact(typeA, "plan")); err != nil {
			t.Fatal(err)
		}
		// An image (Docker media types) and an OCI index are not artifacts.
		img, _ := random.Image(64, 1)
		if err := remote.Write(mustRef(t, repo+":image"), img); err != nil {
			t.Fatal(err)
		}
		idx, _ := random.Index(64, 1, 1)
		if err := remote.WriteIndex(mustRef(t, repo+":index"), idx); err != nil {
			t.Fatal(err)
		}

		// A manifest that understates a blob's size (registries take it:
		// docker-registry 2.8 checks that blobs exist, not their sizes).
		good, err := remote.Get(mustRef(t, repo+":v1"))
		if err != nil {
			t.Fatal(err)
		}
		var liar v1.Manifest
		json.Unmarshal(good.Manifest, &liar)
		liar.Layers[1].Size -= 3
		liarRaw, _ := json.Marshal(liar)
		if err := remote.Put(mustRef(t, repo+":liar"), rawManifest{liarRaw, types.OCIManifestSchema1}); err != nil {
			t.Fatal(err)
		}
		if p, err := publish.Pull(c, repo+":liar", typeA, 1<<10); err == nil || errors.Is(err, publish.ErrNotFound) {
			t.Errorf("a manifest understating a blob's size: got %+v %v, want an error", p, err)
		} else if !strings.Contains(err.Error(), "bytes") {
			t.Errorf("a manifest understating a blob's size: %v", err)
		}

		// A manifest over 4 MiB, where the registry takes one
		// (docker-registry 2.8 refuses those itself).
		var big v1.Manifest
		json.Unmarshal(good.Manifest, &big)
		big.Annotations = map[string]string{"dev.nlx.padding": strings.Repeat("x", 4<<20)}
		bigRaw, _ := json.Marshal(big)
		if err := remote.Put(mustRef(t, repo+":big"), rawManifest{bigRaw, types.OCIManifestSchema1}); err != nil {
			t.Logf("the registry refuses a manifest of %d bytes: %v", len(bigRaw), err)
		} else if _, err := publish.Pull(c, repo+":big", typeA, 1<<10); !errors.Is(err, publish.ErrTooLarge) {
			t.Errorf("a manifest of %d bytes: got %v, want ErrTooLarge", len(bigRaw), err)
		}

		for _, tc := range []struct {
			name, ref, kind string
			limit           int64
			want            error
		}{
			{"wrong artifactType", repo + ":v1", typeB, 1 << 10, publish.ErrWrongType},
			{"image", repo + ":image", typeA, 1 << 10, publish.ErrWrongType},
			{"index", repo + ":index", typeA, 1 << 10, publish.ErrWrongType},
			{"blob over the limit", repo + ":v1", typeA, 10, publish.ErrTooLarge},
			{"missing tag", repo + ":nope", typeA, 1 << 10, publish.ErrNotFound},
			{"missing repository", r.host + "/nlx/nothing:v1", typeA, 1 << 10, publish.ErrNotFound},
			{"missing digest", repo + "@sha256:" + strings.Repeat("a", 64), typeA, 1 << 10, publish.ErrNotFound},
		} {
			t.Run(tc.name, func(t *testing.T) {
				p, err := publish.Pull(c, tc.ref, tc.kind, tc.limit)
				if !errors.Is(err, tc.want) {
					t.Errorf("got %v %v, want %v", p, err, tc.want)
				}
			})
		}
		// The limit is per blob and inclusive: the largest blob fits exactly.
		if _, err := publish.Pull(c, repo+":v1", typeA, int64(len("second plan"))); err == nil {
			t.Error("a limit below the first blob: no error")
		}
		if _, err := publish.Pull(c, repo+":v1", typeA, int64(len(`{"text":"plan"}`))); err != nil {
			t.Errorf("a limit equal to the largest blob: %v", err)
		}
		if _, err := publish.Resolve(c, repo+":nope"); !errors.Is(err, publish.ErrNotFound) {
			t.Errorf("resolve a missing tag: got %v, want ErrNotFound", err)
		}
		if err := publish.Tag(c, repo+":nope", repo+":x"); !errors.Is(err, publish.ErrNotFound) {
			t.Errorf("tag from a missing tag: got %v, want ErrNotFound", err)
		}
		if _, err := publish.Pull(c, repo, typeA, 1<<10); err == nil {
			t.Error("pull of a bare repository (an implicit :latest): no error")
		}
	})
}

// subjectOf pushes a plan to attach things to, and returns its digest
// reference and descriptor.
func subjectOf(t *testing.T, c context.Context, repo, text string) (string, v1.Descriptor) {
	t.Helper()
	d, err := publish.Push(c, repo+":plan-"+text, artifact("application/vnd.nlx.test.plan.v1", text))
	if err != nil {
		t.Fatal(err)
	}
	return repo + "@" + d.Digest.String(), d
}

func attach(t *testing.T, c context.Context, repo, kind, text string, subject v1.Descriptor) v1.Descriptor {
	t.Helper()
	a := artifact(kind, text)
	a.Subject = &subject
	d, err := publish.Push(c, repo, a)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func digests(ds []v1.Descriptor) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.Digest.String())
	}
	return out
}

func sortedDigests(ds ...v1.Descriptor) []string {
	out := digests(ds)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// fallbackTag is the OCI 1.1 referrers tag of a digest.
func fallbackTag(repo string, d v1.Descriptor) string {
	return repo + ":sha256-" + d.Digest.Hex
}

func TestReferrers(t *testing.T) {
	eachRegistry(t, func(t *testing.T, r reg) {
		c := ctx(t)
		repo := r.host + "/nlx/plans"
		subject, sd := subjectOf(t, c, repo, "one")
		a1 := attach(t, c, repo, typeA, "approval 1", sd)
		a2 := attach(t, c, repo, typeA, "approval 2", sd)
		b1 := attach(t, c, repo, typeB, "other", sd)

		got, err := publish.Referrers(c, subject, typeA)
		if err != nil {
			t.Fatal(err)
		}
		if want := sortedDigests(a1, a2); !reflect.DeepEqual(digests(got), want) {
			t.Errorf("referrers of type A: got %v, want %v", digests(got), want)
		}
		for _, d := range got {
			if d.ArtifactType != typeA || d.Annotations["dev.nlx.a"] != "1" || d.MediaType != types.OCIManifestSchema1 {
				t.Errorf("referrer descriptor: got %+v", d)
			}
		}
		if got, _ := publish.Referrers(c, subject, typeB); !reflect.DeepEqual(digests(got), digests([]v1.Descriptor{b1})) {
			t.Errorf("referrers of type B: got %v, want %v", digests(got), b1.Digest)
		}
		if got, _ := publish.Referrers(c, subject, ""); len(got) != 3 {
			t.Errorf("all referrers: got %v, want 3", digests(got))
		}
		// A pulled referrer names its subject.
		p, err := publish.Pull(c, repo+"@"+a1.Digest.String(), typeA, 1<<10)
		if err != nil {
			t.Fatal(err)
		}
		if p.Subject == nil || p.Subject.Digest != sd.Digest || p.Subject.Size != sd.Size {
			t.Errorf("pulled subject: got %+v, want %+v", p.Subject, sd)
		}

		// Nothing attached, or no such subject at all: an empty list.
		_, lonely := subjectOf(t, c, repo, "lonely")
		for _, s := range []string{repo + "@" + lonely.Digest.String(), r.host + "/nlx/none@" + lonely.Digest.String()} {
			got, err := publish.Referrers(c, s, typeA)
			if err != nil || got == nil || len(got) != 0 {
				t.Errorf("referrers of %s: got %#v %v, want an empty list", s, got, err)
			}
		}

		// Where the referrers are kept: the registry's API, or the
		// referrers tag, an OCI index of their descriptors.
		tagged, err := remote.Get(mustRef(t, fallbackTag(repo, sd)))
		if r.api {
			if err == nil {
				t.Errorf("registry with the referrers API: the referrers tag exists")
			}
			return
		}
		if err != nil {
			t.Fatalf("the referrers tag: %v", err)
		}
		var idx v1.IndexManifest
		if err := json.Unmarshal(tagged.Manifest, &idx); err != nil {
			t.Fatal(err)
		}
		if tagged.MediaType != types.OCIImageIndex || idx.MediaType != types.OCIImageIndex || idx.SchemaVersion != 2 {
			t.Errorf("the referrers tag: got %s %s", tagged.MediaType, tagged.Manifest)
		}
		if want := sortedDigests(a1, a2, b1); !reflect.DeepEqual(digests(idx.Manifests), want) {
			t.Errorf("the referrers tag lists %v, want %v", digests(idx.Manifests), want)
		}
		for _, d := range idx.Manifests {
			if d.ArtifactType == "" || d.Annotations["dev.nlx.text"] == "" || d.Size == 0 {
				t.Errorf("the referrers tag's descriptor lacks artifactType or annotations: %+v", d)
			}
		}
	})
}

func TestConcurrentAttach(t *testing.T) {
	eachRegistry(t, func(t *testing.T, r reg) {
		c := ctx(t)
		repo := r.host + "/nlx/plans"
		for _, n := range []int{2, 8} {
			subject, sd := subjectOf(t, c, repo, fmt.Sprint("concurrent-", n))
			var wg sync.WaitGroup
			ds := make([]v1.Descriptor, n)
			errs := make([]error, n)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					a := artifact(typeA, fmt.Sprint("approval ", i))
					a.Subject = &sd
					ds[i], errs[i] = publish.Push(c, repo, a)
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			got, err := publish.Referrers(c, subject, typeA)
			if err != nil {
				t.Fatal(err)
			}
			if want := sortedDigests(ds...); !reflect.DeepEqual(digests(got), want) {
				t.Errorf("%d concurrent attaches: got %v, want %v", n, digests(got), want)
			}
		}
	})
}

// rawManifest PUTs given bytes, as a client of its own would.
type rawManifest struct {
	b  []byte
	mt types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.b, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }

// TestAttachRepairsLostUpdate plays the race the referrers tag loses: a
// writer that read the tag before our attach writes it back, without us,
// during our write (round 0) or while we wait before our second look
// (round 1, as a slow client in another process would). Push must notice
// and write again; and a re-push of a referrer the tag lost for good puts
// it back.
func TestAttachRepairsLostUpdate(t *testing.T) {
	eachRegistry(t, func(t *testing.T, r reg) {
		if r.api {
			t.Skip("the registry keeps the referrers list; there is no tag to lose")
		}
		c := ctx(t)
		repo := r.host + "/nlx/plans"
		for _, round := range []int{0, 1} {
			subject, sd := subjectOf(t, c, repo, fmt.Sprint("race-", round))
			first := attach(t, c, repo, typeA, "first", sd)
			tag := mustRef(t, fallbackTag(repo, sd))
			before, err := remote.Get(tag)
			if err != nil {
				t.Fatal(err)
			}
			var rounds []int
			restore := publish.SetAttachHook(func(n int) {
				rounds = append(rounds, n)
				if n != round {
					return
				}
				if err := remote.Put(tag, rawManifest{before.Manifest, types.OCIImageIndex}); err != nil {
					t.Error(err)
				}
			})
			second := attach(t, c, repo, typeA, "second", sd)
			restore()
			if !reflect.DeepEqual(rounds, []int{0, 1}) {
				t.Fatalf("Push checked the list in rounds %v, want [0 1]", rounds)
			}
			got, err := publish.Referrers(c, subject, typeA)
			if err != nil {
				t.Fatal(err)
			}
			if want := sortedDigests(first, second); !reflect.DeepEqual(digests(got), want) {
				t.Errorf("after a lost update in round %d: got %v, want %v", round, digests(got), want)
			}

			// The tag loses second for good (its writer gone); pushing
			// second again puts it back, though the registry has its
			// manifest.
			if err := remote.Put(tag, rawManifest{before.Manifest, types.OCIImageIndex}); err != nil {
				t.Fatal(err)
			}
			if got, _ := publish.Referrers(c, subject, typeA); len(got) != 1 {
				t.Fatalf("after dropping second: got %v", digests(got))
			}
			again := attach(t, c, repo, typeA, "second", sd)
			if !reflect.DeepEqual(again, second) {
				t.Fatalf("re-push: got %v, want %v", again, second)
			}
			if got, _ := publish.Referrers(c, subject, typeA); !reflect.DeepEqual(digests(got), sortedDigests(first, second)) {
				t.Errorf("after the re-push: got %v, want %v", digests(got), sortedDigests(first, second))
			}
		}
	})
}

func TestTagMoves(t *testing.T) {
	eachRegistry(t, func(t *testing.T, r reg) {
		c := ctx(t)
		repo := r.host + "/nlx/state"
		v1d, err := publish.Push(c, repo+":build-1", artifact(typeA, "one"))
		if err != nil {
			t.Fatal(err)
		}
		v2d, err := publish.Push(c, repo+":build-2", artifact(typeA, "two"))
		if err != nil {
			t.Fatal(err)
		}
		approval := attach(t, c, repo, typeB, "approval of one", v1d)

		current := repo + ":current"
		if err := publish.Tag(c, repo+"@"+v1d.Digest.String(), current); err != nil {
			t.Fatal(err)
		}
		if got, err := publish.Resolve(c, current); err != nil || got.Digest != v1d.Digest {
			t.Errorf("current: got %v %v, want %s", got.Digest, err, v1d.Digest)
		}
		// On merge, the tag moves to build 2.
		if err := publish.Tag(c, repo+":build-2", current); err != nil {
			t.Fatal(err)
		}
		if got, err := publish.Resolve(c, current); err != nil || got.Digest != v2d.Digest {
			t.Errorf("moved current: got %v %v, want %s", got.Digest, err, v2d.Digest)
		}
		if p, err := publish.Pull(c, current, typeA, 1<<10); err != nil || p.Descriptor.Digest != v2d.Digest {
			t.Errorf("pull moved current: got %v, want %s", err, v2d.Digest)
		}
		// What referred to build 1 still does.
		got, err := publish.Referrers(c, repo+"@"+v1d.Digest.String(), typeB)
		if err != nil || !reflect.DeepEqual(digests(got), digests([]v1.Descriptor{approval})) {
			t.Errorf("referrers of build 1 after the move: got %v %v, want %s", digests(got), err, approval.Digest)
		}
		// A tag is in its source's repository.
		if err := publish.Tag(c, repo+":build-2", r.host+"/nlx/other:current"); err == nil {
			t.Error("tag in another repository: no error")
		}
		if err := publish.Tag(c, repo+":build-2", r.host+"/nlx/state"); err == nil {
			t.Error("tag without a tag: no error")
		}
	})
}

// TestPullHangingRegistry: a registry that accepts the connection and
// never answers costs Pull its context's deadline, no more.
func TestPullHangingRegistry(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	defer srv.Close()
	const deadline = time.Second
	c, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	_, err := publish.Pull(c, strings.TrimPrefix(srv.URL, "http://")+"/nlx/state:v1", typeA, 1<<10)
	if took := time.Since(start); err == nil || took > deadline+time.Second {
		t.Fatalf("pull from a registry that never answers: %v after %s, want an error by %s", err, took, deadline)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want context.DeadlineExceeded", err)
	}
}

// TestRegistryOutage stops docker-registry under the client: Pull fails,
// within its context's deadline, and works again once the registry is
// back on the same storage.
func TestRegistryOutage(t *testing.T) {
	proc := testtool.RegistryAt(t)
	c := ctx(t)
	ref := proc.Addr + "/nlx/state:v1"
	a := artifact(typeA, "survives")
	d, err := publish.Push(c, ref, a)
	if err != nil {
		t.Fatal(err)
	}
	proc.Stop()

	const deadline = 3 * time.Second
	short, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	start := time.Now()
	p, err := publish.Pull(short, ref, typeA, 1<<10)
	took := time.Since(start)
	if err == nil {
		t.Fatalf("pull from a stopped registry: got %+v, want an error", p)
	}
	if errors.Is(err, publish.ErrNotFound) {
		t.Errorf("a registry that is down is not a missing artifact: %v", err)
	}
	if !strings.Contains(err.Error(), ref) {
		t.Errorf("the error does not name the reference: %v", err)
	}
	if took > deadline+time.Second {
		t.Errorf("pull took %s, beyond the deadline %s", took, deadline)
	}
	t.Logf("pull while down (%s): %v", took.Round(time.Millisecond), err)

	proc.Start()
	p, err = publish.Pull(c, ref, typeA, 1<<10)
	if err != nil {
		t.Fatalf("pull after the restart: %v", err)
	}
	if p.Descriptor.Digest != d.Digest || !bytes.Equal(p.Blobs[0].Data, a.Blobs[0].Data) {
		t.Errorf("pull after the restart: got %s, want %s", p.Descriptor.Digest, d.Digest)
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReferenceNames(t *testing.T) {
	for _, tt := range []struct {
		s, repo string
		ref     bool
	}{
		{"127.0.0.1:5000/team/pi/plan:main", "127.0.0.1:5000/team/pi/plan", true},
		{"127.0.0.1:5000/team/pi/plan@sha256:" + strings.Repeat("ab", 32), "127.0.0.1:5000/team/pi/plan", true},
		{"registry.example/team/pi/state", "registry.example/team/pi/state", false}, // no tag or digest
		{"plan.json", "index.docker.io/library/plan.json", false},                   // no path
		{"examples/gitops/plan.json", "index.docker.io/examples/gitops/plan.json", false},
	} {
		if got := publish.IsReference(tt.s); got != tt.ref {
			t.Errorf("IsReference(%q) = %v, want %v", tt.s, got, tt.ref)
		}
		if got := publish.Repository(tt.s); got != tt.repo {
			t.Errorf("Repository(%q) = %q, want %q", tt.s, got, tt.repo)
		}
	}
}
