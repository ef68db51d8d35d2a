package publish

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// How referrers get listed. go-containerregistry v0.22.1 does both halves
// of the OCI distribution spec 1.1 by itself:
//
//   - remote.Write of a manifest with a subject asks GET
//     /v2/<repo>/referrers/<digest>; when the registry answers 200 it keeps
//     the list itself (the referrers API), otherwise (docker-registry 2.8
//     answers 404) Write reads the index at the referrers tag
//     sha256-<hex>, appends the new descriptor (artifactType, annotations)
//     unless it is there, sorts, and PUTs it back.
//   - remote.Referrers tries the API and falls back to that tag; no tag
//     means no referrers.
//
// What it lacks, added here: the tag update is a plain read-modify-write,
// and Write skips a manifest the registry already has (so a re-push would
// not repair a list that lost it); some registries (go-containerregistry's
// own pkg/registry) report an artifact's config media type, not its
// artifactType, in the API's list.

// attachAttempts bounds how often Push writes a referrer again when the
// referrers list does not name it afterwards.
const attachAttempts = 5

// settle is how long Push waits, after finding its referrer in a referrers
// tag, before it looks again: long enough for another client's
// read-modify-write of the tag, begun before our write, to land.
var settle = 500 * time.Millisecond

// attachHook, when set (by tests), runs before each of Push's checks of
// the referrers list, 0 after its write and 1 after settle, to play a
// concurrent writer.
var attachHook func(round int)

// subjects serialises, within this process, the attaches to one subject:
// they would otherwise lose each other's update of its referrers tag.
var subjects = struct {
	sync.Mutex
	m map[string]*subjectLock
}{m: map[string]*subjectLock{}}

type subjectLock struct {
	sem   chan struct{}
	users int
}

// lockSubject takes the lock of the subject key (repo@digest), giving up
// when ctx ends; unlock releases it.
func lockSubject(ctx context.Context, key string) (unlock func(), err error) {
	subjects.Lock()
	l := subjects.m[key]
	if l == nil {
		l = &subjectLock{sem: make(chan struct{}, 1)}
		subjects.m[key] = l
	}
	l.users++
	subjects.Unlock()
	release := func() {
		subjects.Lock()
		if l.users--; l.users == 0 {
			delete(subjects.m, key)
		}
		subjects.Unlock()
	}
	select {
	case l.sem <- struct{}{}:
		return func() { <-l.sem; release() }, nil
	case <-ctx.Done():
		release()
		return nil, fmt.Errorf("wait for another attach to %s: %w", key, ctx.Err())
	}
}

// attach pushes (by push) img, a referrer of subject in repo, and makes
// sure the subject's referrers list names it.
//
// On a registry with the referrers API the registry keeps the list and the
// first check finds img. On one without (docker-registry 2.8) the list is
// the referrers tag sha256-<hex>, which remote.Write updated by
// read-modify-write; the registry has no conditional PUT, so another
// attach that read the tag before our PUT and writes it after drops img.
// So: check after writing and, while img is missing, PUT the manifest
// again (remote.Put redoes the read-modify-write on what is there now), a
// few times, with a random pause so two repairing writers drift apart;
// then, where the list is a tag, wait settle and check (and repair) once
// more, for writers from other processes.
//
// Guaranteed: attaches from this process to one subject are serialised
// (lockSubject) and never lose each other; when Push returns nil, img was
// listed at its last check; pushing the same artifact again repairs a list
// that lost it. Not guaranteed: another client whose read-modify-write of
// the tag began before our write and ends after our last check (it took
// longer than settle) still drops img, and nothing notices until someone
// pushes img again. Only the referrers API closes that window.
func attach(ctx context.Context, repo name.Repository, img *artifactImage, subject v1.Hash, push func() error) error {
	sub := repo.Digest(subject.String())
	for round := 0; ; round++ {
		unlock, err := lockSubject(ctx, sub.String())
		if err != nil {
			return err
		}
		if round == 0 {
			err = push()
		}
		if err == nil {
			if attachHook != nil {
				attachHook(round)
			}
			err = ensureListed(ctx, sub, img)
		}
		// Later attaches from this process read the tag after our write
		// and keep img: the lock need not cover the wait.
		unlock()
		if err != nil || round == 1 {
			return err
		}
		tagged, err := hasReferrersTag(ctx, sub)
		if err != nil || !tagged {
			return err
		}
		select {
		case <-time.After(settle):
		case <-ctx.Done():
			return fmt.Errorf("attach %s to %s: %w", img.desc.Digest, sub, ctx.Err())
		}
	}
}

// ensureListed checks that the referrers list of sub names img, writing
// img again, a few times, while it does not.
func ensureListed(ctx context.Context, sub name.Digest, img *artifactImage) error {
	self := sub.Context().Digest(img.desc.Digest.String())
	for attempt := 1; ; attempt++ {
		descs, err := listReferrers(ctx, sub, nil)
		if err != nil {
			return wrap("list the referrers of", sub.String(), err)
		}
		for _, d := range descs {
			if d.Digest == img.desc.Digest {
				return nil
			}
		}
		if attempt == attachAttempts {
			return fmt.Errorf("attach %s: the referrers of %s still do not name it after %d writes: other clients keep rewriting the referrers tag", self, sub, attempt)
		}
		pause := time.Duration(10<<attempt)*time.Millisecond + rand.N(20*time.Millisecond)
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return fmt.Errorf("attach %s to %s: %w", self, sub, ctx.Err())
		}
		if err := remote.Put(self, img, remoteOptions(ctx)...); err != nil {
			return wrap("attach again", self.String(), err)
		}
	}
}

// hasReferrersTag reports whether the repository has the referrers tag of
// sub, that is whether its referrers list is one a client wrote.
func hasReferrersTag(ctx context.Context, sub name.Digest) (bool, error) {
	tag := sub.Context().Tag(strings.Replace(sub.DigestStr(), ":", "-", 1))
	_, err := remote.Head(tag, remoteOptions(ctx)...)
	if notFound(err) {
		return false, nil
	}
	if err != nil {
		return false, wrap("look for the referrers tag", tag.String(), err)
	}
	return true, nil
}

// listReferrers lists what the registry says refers to sub, through the
// API or the referrers tag, as go-containerregistry finds them.
func listReferrers(ctx context.Context, sub name.Digest, p *remote.Puller) ([]v1.Descriptor, error) {
	opts := remoteOptions(ctx)
	if p != nil {
		opts = append(opts, remote.Reuse(p))
	}
	idx, err := remote.Referrers(sub, opts...)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	return m.Manifests, nil
}

// Referrers lists the manifests that name subject, a digest reference
// repo@sha256:..., as their subject and have this artifactType (all of
// them when artifactType is ""), sorted by digest. It reads the referrers
// API or, where the registry has none, the referrers tag. A subject with
// none, or one the registry does not have, gives an empty list.
func Referrers(ctx context.Context, subject string, artifactType string) ([]v1.Descriptor, error) {
	sub, err := name.NewDigest(subject)
	if err != nil {
		return nil, fmt.Errorf("subject %s: %w", subject, err)
	}
	p, err := remote.NewPuller(remoteOptions(ctx)...)
	if err != nil {
		return nil, fmt.Errorf("referrers of %s: %w", subject, err)
	}
	descs, err := listReferrers(ctx, sub, p)
	if err != nil {
		return nil, wrap("referrers of", subject, err)
	}
	out := []v1.Descriptor{}
	seen := map[v1.Hash]bool{}
	for _, d := range descs {
		if seen[d.Digest] {
			continue
		}
		seen[d.Digest] = true
		if d.ArtifactType == "" || d.ArtifactType == string(types.OCIEmptyJSON) {
			// The spec has the list carry the manifest's artifactType;
			// a registry that gave the empty config's media type instead
			// is asked for the manifest.
			ok, err := manifestType(ctx, p, sub.Context().Digest(d.Digest.String()), &d)
			if err != nil {
				return nil, wrap("referrers of "+subject+": read", d.Digest.String(), err)
			}
			if !ok {
				continue
			}
		}
		if artifactType == "" || d.ArtifactType == artifactType {
			out = append(out, d)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Digest.String() < out[j].Digest.String() })
	return out, nil
}

// manifestType fills d's artifactType (and annotations, when the list gave
// none) from the manifest at ref. It reports false for a manifest that is
// gone: a referrers tag can outlive what it lists.
func manifestType(ctx context.Context, p *remote.Puller, ref name.Digest, d *v1.Descriptor) (bool, error) {
	got, err := p.Get(ctx, ref)
	if notFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if len(got.Manifest) > manifestLimit {
		return false, fmt.Errorf("%w: the manifest has %d bytes", ErrTooLarge, len(got.Manifest))
	}
	var m struct {
		ArtifactType string            `json:"artifactType"`
		Config       v1.Descriptor     `json:"config"`
		Annotations  map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(got.Manifest, &m); err != nil {
		return false, err
	}
	d.ArtifactType = m.ArtifactType
	if d.ArtifactType == "" {
		d.ArtifactType = string(m.Config.MediaType)
	}
	if d.Annotations == nil {
		d.Annotations = m.Annotations
	}
	return true, nil
}
