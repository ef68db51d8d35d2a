package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nlx-dev/nlx/approval"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/plan"
	"github.com/nlx-dev/nlx/publish"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/schema"
	"github.com/nlx-dev/nlx/state"
)

// What nlx publishes to a registry, each an OCI artifact of its own type
// with versioned media types (docs/gitops.md).
const (
	stateArtifactType     = "application/vnd.nlx.state.v1"
	stateMediaType        = "application/vnd.nlx.state.snapshot.v1+json"
	planArtifactType      = "application/vnd.nlx.plan.v1"
	planMediaType         = "application/vnd.nlx.plan.file.v3+json" // plan format 3
	approvalArtifactType  = "application/vnd.nlx.approval.v1"
	approvalStatementType = "application/vnd.nlx.approval.statement.v1+json"
	approvalSignatureType = "application/vnd.nlx.approval.signature.v1+sshsig"

	annoLineage  = "dev.nlx.state.lineage"
	annoSerial   = "dev.nlx.state.serial"
	annoBasis    = "dev.nlx.state.basis"
	annoPlanHash = "dev.nlx.plan.hash"
	annoAddress  = "dev.nlx.approval.address"
	annoRisk     = "dev.nlx.approval.risk"
	annoActor    = "dev.nlx.approval.actor"
)

// snapshotLimit bounds a published state read back (a 14,000-resource
// fleet's is about 5.5 MiB).
const snapshotLimit = 256 << 20

// publishState pushes the state's snapshot to ref.
func publishState(ctx context.Context, db *state.DB, ref string) (string, *reconcile.Snapshot, string, error) {
	snap, err := db.Snapshot(ctx)
	if err != nil {
		return "", nil, "", err
	}
	data, basis, err := reconcile.EncodeSnapshot(snap)
	if err != nil {
		return "", nil, "", err
	}
	digest, err := pushSnapshot(ctx, snap, data, basis, ref)
	return digest, snap, basis, err
}

// pushSnapshot pushes snap's encoding (data, with its basis) to ref.
func pushSnapshot(ctx context.Context, snap *reconcile.Snapshot, data []byte, basis, ref string) (string, error) {
	desc, err := publish.Push(ctx, ref, publish.Artifact{
		ArtifactType: stateArtifactType,
		Blobs:        []publish.Blob{{MediaType: stateMediaType, Data: data}},
		Annotations:  map[string]string{annoLineage: snap.Lineage, annoSerial: strconv.FormatInt(snap.Serial, 10), annoBasis: basis},
	})
	if err != nil {
		return "", fmt.Errorf("publish the state: %w", err)
	}
	return desc.Digest.String(), nil
}

// loadSnapshot reads a published state: a file (nlx state export --out)
// when from names one, else a registry reference (nlx state publish).
func loadSnapshot(ctx context.Context, from string) (*reconcile.Snapshot, error) {
	var data []byte
	if fi, err := os.Stat(from); err == nil && fi.Mode().IsRegular() {
		if data, err = os.ReadFile(from); err != nil {
			return nil, fmt.Errorf("--state-from: %w", err)
		}
	} else {
		pulled, err := publish.Pull(ctx, from, stateArtifactType, snapshotLimit)
		if err != nil {
			return nil, fmt.Errorf("--state-from %s: %w", from, err)
		}
		if len(pulled.Blobs) != 1 || pulled.Blobs[0].MediaType != stateMediaType {
			return nil, fmt.Errorf("--state-from %s: the artifact does not hold one %s", from, stateMediaType)
		}
		data = pulled.Blobs[0].Data
	}
	snap, _, err := reconcile.DecodeSnapshot(data)
	if err != nil {
		return nil, reason.Wrap(reason.InvalidUsage, err, "--state-from %s", from)
	}
	return snap, nil
}

// pushPlan pushes the plan file's bytes to ref; it returns the digest
// reference of the pushed artifact.
func pushPlan(ctx context.Context, p *plan.Plan, dir, ref string) (string, error) {
	data, err := plan.Encode(p)
	if err != nil {
		return "", err
	}
	config, err := packConfig(dir, p)
	if err != nil {
		return "", err
	}
	desc, err := publish.Push(ctx, ref, publish.Artifact{
		ArtifactType: planArtifactType,
		Blobs:        []publish.Blob{{MediaType: planMediaType, Data: data}, {MediaType: configMediaType, Data: config}},
		Annotations: map[string]string{annoPlanHash: p.PlanHash, annoLineage: p.State.Lineage,
			annoSerial: strconv.FormatInt(p.State.Serial, 10), annoBasis: p.State.Basis},
	})
	if err != nil {
		return "", fmt.Errorf("push the plan: %w", err)
	}
	return publish.Repository(ref) + "@" + desc.Digest.String(), nil
}

// pulledPlan is a plan read from a registry.
type pulledPlan struct {
	Plan   *plan.Plan
	Ref    string // repo@sha256:..., the artifact's digest reference
	Config []byte // the config inputs' tar
}

// pullPlan reads the plan at ref, verified as nlx reads a plan file.
func pullPlan(ctx context.Context, ref string) (*pulledPlan, error) {
	// The plan file's own bound (NLX_MAX_PLAN_BYTES) holds for each blob:
	// nothing larger is read, as from a file.
	limit, err := plan.MaxPlanBytes()
	if err != nil {
		return nil, reason.Wrap(reason.InvalidUsage, err, "the plan size limit")
	}
	pulled, err := publish.Pull(ctx, ref, planArtifactType, limit)
	if errors.Is(err, publish.ErrTooLarge) {
		return nil, reason.Wrap(reason.PlanTooLarge, err, "%s is larger than %s allows", ref, plan.EnvMaxPlanBytes)
	}
	if err != nil {
		return nil, err
	}
	if len(pulled.Blobs) != 2 || pulled.Blobs[0].MediaType != planMediaType || pulled.Blobs[1].MediaType != configMediaType {
		return nil, reason.New(reason.InvalidPlanFile, "%s does not hold a %s and its %s", ref, planMediaType, configMediaType)
	}
	p, err := plan.Read(bytes.NewReader(pulled.Blobs[0].Data))
	if err != nil {
		return nil, err
	}
	return &pulledPlan{Plan: p, Ref: pulled.Ref, Config: pulled.Blobs[1].Data}, nil
}

// isRegistryRef tells a plan argument that is a registry reference from a
// plan file: an existing file is a file.
func isRegistryRef(arg string) bool {
	if _, err := os.Stat(arg); err == nil {
		return false
	}
	return publish.IsReference(arg)
}

// attachApproval pushes one signed approval as a referrer of the plan at
// planRef (a digest reference).
func attachApproval(ctx context.Context, planRef string, s *approval.Signed) error {
	desc, err := publish.Resolve(ctx, planRef)
	if err != nil {
		return err
	}
	_, err = publish.Push(ctx, publish.Repository(planRef), publish.Artifact{
		ArtifactType: approvalArtifactType,
		Blobs: []publish.Blob{
			{MediaType: approvalStatementType, Data: s.Message},
			{MediaType: approvalSignatureType, Data: s.Signature},
		},
		Annotations: map[string]string{annoPlanHash: s.PlanHash, annoAddress: s.Address, annoRisk: string(s.Risk), annoActor: s.Actor},
		Subject:     &desc,
	})
	if err != nil {
		return fmt.Errorf("attach the approval of %s %s: %w", s.Address, s.Risk, err)
	}
	return nil
}

// attachedApprovals reads the signed approvals attached to the plan at
// planRef (a digest reference). One that does not verify is an error:
// someone attached it on purpose, and nlx never quietly drops evidence.
func attachedApprovals(ctx context.Context, planRef string) ([]reconcile.SignedApproval, error) {
	descs, err := publish.Referrers(ctx, planRef, approvalArtifactType)
	if err != nil {
		return nil, err
	}
	var out []reconcile.SignedApproval
	for _, d := range descs {
		ref := publish.Repository(planRef) + "@" + d.Digest.String()
		pulled, err := publish.Pull(ctx, ref, approvalArtifactType, 64<<10)
		if err != nil {
			return nil, err
		}
		var msg, sig []byte
		for _, b := range pulled.Blobs {
			switch b.MediaType {
			case approvalStatementType:
				msg = b.Data
			case approvalSignatureType:
				sig = b.Data
			}
		}
		s, err := approval.Parse(msg, sig)
		if err != nil {
			return nil, reason.Wrap(reason.ApprovalSignature, err, "the approval attached as %s", ref)
		}
		s.File = ref
		sa, err := signedApproval(s)
		if err != nil {
			return nil, err
		}
		out = append(out, sa)
	}
	return out, nil
}

// dirApprovals reads the signed approvals in dir (nlx approve --sign --out).
func dirApprovals(dir string) ([]reconcile.SignedApproval, error) {
	list, err := approval.ReadDir(dir)
	if err != nil {
		return nil, reason.Wrap(reason.ApprovalSignature, err, "--approvals %s", dir)
	}
	var out []reconcile.SignedApproval
	for _, s := range list {
		sa, err := signedApproval(s)
		if err != nil {
			return nil, err
		}
		out = append(out, sa)
	}
	return out, nil
}

// signedApproval is a verified signature as the apply engine takes it.
func signedApproval(s *approval.Signed) (reconcile.SignedApproval, error) {
	expires, err := s.Expires()
	if err != nil {
		return reconcile.SignedApproval{}, reason.Wrap(reason.ApprovalSignature, err, "%s", s.File)
	}
	// An approval is identified by what it says and the key that says
	// it, not by its signature's bytes: an ECDSA signature can be
	// rewritten into another valid one without the key, and a second
	// signature of the same statement is the same approval, used once.
	id := sha256.Sum256(append(append(bytes.Clone(s.Message), 0), s.Fingerprint...))
	return reconcile.SignedApproval{Key: s.Fingerprint, Approval: reconcile.Approval{
		PlanHash: s.PlanHash, Address: s.Address, Risk: s.Risk, Actor: s.Actor, Reason: s.Reason,
		ExpiresAt: expires, CreatedAt: time.Now(), Signature: "sha256:" + hex.EncodeToString(id[:]), Source: s.File,
	}}, nil
}

// configMediaType is the plan artifact's second blob: the config inputs
// the plan binds (every file of Inputs.Files, nothing else), as a tar, so
// that a host following a registry re-derives the plan from exactly them.
const configMediaType = "application/vnd.nlx.plan.config.v1.tar"

// packConfig tars the plan's config inputs from dir, in the plan's order,
// with fixed headers, after proving each file is the one the plan hashed.
func packConfig(dir string, p *plan.Plan) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range p.Inputs.Files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			return nil, fmt.Errorf("pack config: %w", err)
		}
		if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(data)) != f.Size {
			return nil, reason.New(reason.ConfigChanged, "config file %s changed since the plan; plan again", f.Path)
		}
		if err := tw.WriteHeader(&tar.Header{Name: f.Path, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// unpackConfig writes a plan artifact's config tar into dir (which must not
// exist), accepting exactly the plan's input files, each with its hash and
// size: nothing else, no path out of dir.
func unpackConfig(data []byte, p *plan.Plan, dir string) error {
	want := map[string]schema.InputFile{}
	for _, f := range p.Inputs.Files {
		want[f.Path] = f
	}
	tr := tar.NewReader(bytes.NewReader(data))
	seen := map[string]bool{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("config of the plan: %w", err)
		}
		f, ok := want[h.Name]
		if !ok || seen[h.Name] || h.Typeflag != tar.TypeReg || h.Size != f.Size {
			return reason.New(reason.InvalidPlanFile, "the plan's config holds %q, which is not one of its inputs as the plan hashed them", h.Name)
		}
		body, err := io.ReadAll(io.LimitReader(tr, f.Size+1))
		if err != nil {
			return fmt.Errorf("config of the plan: %w", err)
		}
		if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != f.SHA256 {
			return reason.New(reason.InvalidPlanFile, "the plan's config file %s is not the one the plan hashed", h.Name)
		}
		path := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(path, filepath.Clean(dir)+string(filepath.Separator)) {
			return reason.New(reason.PathTraversal, "the plan's config file %q leads out of its directory", h.Name)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, body, 0o644); err != nil {
			return err
		}
		seen[h.Name] = true
	}
	if len(seen) != len(want) {
		return reason.New(reason.InvalidPlanFile, "the plan's config holds %d of its %d input files", len(seen), len(want))
	}
	for _, d := range p.Inputs.Dirs {
		if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
			return err
		}
	}
	return nil
}
