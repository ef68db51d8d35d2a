package schema

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlx-dev/nlx/internal/reason"
)

// zetaWorkspace is a workspace of team zeta, which owns no skill of the
// base config, on image "shared".
const zetaWorkspace = `package base

workspaces: zeta: {
	team:      "zeta"
	kind:      "team"
	image:     "shared"
	policy:    "workspace_write"
	chatReset: "manual"
	members: {zed: "admin"}
	limits: {memory: "512Mi", cpu: 1, pids: 128}
	network: egress: "none"
}
`

func sharedImage(layers string) string {
	return `package base

images: shared: {
	platforms: ["linux/arm64"]
	base:      "scratch"
	layers: [` + layers + `]
}
`
}

// TestImageCarriesForeignSkills: a workspace may run on an image only if
// it is entitled to every team or personal skill package the image bakes
// in, through a skills layer or a files layer whose source is, contains or
// lies inside the package's directory (also through a link). The error is
// at the workspace's image field.
func TestImageCarriesForeignSkills(t *testing.T) {
	tests := []struct {
		name   string
		layers string
		setup  func(t *testing.T, dir string)
		uses   map[string]string // workspace file -> edit giving another workspace the image
		at     string            // "file:marker" of the error; "" for none
		msg    []string          // substrings of the message
	}{
		{
			name:   "skills layer of team core's skill, on team zeta's workspace",
			layers: `{skills: ["team-notes"], dest: "/opt/nlx/skills"}`,
			at:     `zeta.cue:"shared"`,
			msg:    []string{`image "shared" carries team core's skill "team-notes" (layer 0, skills)`, "(team zeta)"},
		},
		{
			name:   "files layer holding every skill package",
			layers: `{go: "example.com/tool", dest: "/usr/bin/tool"}, {files: "skills", dest: "/opt/skills"}`,
			at:     `zeta.cue:"shared"`,
			msg:    []string{`ana's personal skill "my-notes" (layer 1, files skills)`, `team core's skill "team-notes" (layer 1, files skills)`},
		},
		{
			name:   "files layer that is a skill package",
			layers: `{files: "./skills/team-notes/", dest: "/opt/notes"}`,
			at:     `zeta.cue:"shared"`,
			msg:    []string{`skill "team-notes"`},
		},
		{
			name:   "files layer inside a skill package",
			layers: `{files: "skills/team-notes/SKILL.md", dest: "/opt/notes.md"}`,
			at:     `zeta.cue:"shared"`,
			msg:    []string{`skill "team-notes"`},
		},
		{
			name:   "files layer reaching the packages through a link",
			layers: `{files: "vendor/notes", dest: "/opt/notes"}`,
			setup: func(t *testing.T, dir string) {
				must(t, os.MkdirAll(filepath.Join(dir, "vendor"), 0o755))
				must(t, os.Symlink("../skills/team-notes", filepath.Join(dir, "vendor", "notes")))
			},
			at:  `zeta.cue:"shared"`,
			msg: []string{`skill "team-notes" (layer 0, files vendor/notes)`},
		},
		{
			name:   "files layer above the packages, through a link",
			layers: `{files: "everything", dest: "/opt"}`,
			setup: func(t *testing.T, dir string) {
				must(t, os.Symlink(".", filepath.Join(dir, "everything")))
			},
			at:  `zeta.cue:"shared"`,
			msg: []string{`skill "team-notes"`, `skill "my-notes"`},
		},
		{
			name:   "personal skill on its owner's team's workspace",
			layers: `{skills: ["my-notes"], dest: "/opt/nlx/skills"}`,
			uses:   map[string]string{"workspaces.cue": "workspaces: core: {\n\timage: \"shared\"\n"},
			setup: func(t *testing.T, dir string) {
				must(t, os.Remove(filepath.Join(dir, "zeta.cue")))
			},
			at:  `workspaces.cue:"shared"`,
			msg: []string{`ana's personal skill "my-notes"`, "(team core)"},
		},
		{
			name:   "no skill in any layer",
			layers: `{files: "data", dest: "/srv/data"}, {go: "example.com/tool", dest: "/usr/bin/tool"}`,
			setup: func(t *testing.T, dir string) {
				must(t, os.MkdirAll(filepath.Join(dir, "data", "skills-not"), 0o755))
				must(t, os.WriteFile(filepath.Join(dir, "data", "x.txt"), []byte("x"), 0o644))
			},
		},
		{
			name:   "a sibling whose name starts like a package",
			layers: `{files: "skills/team-notes-extra", dest: "/srv/x"}`,
			setup: func(t *testing.T, dir string) {
				must(t, os.MkdirAll(filepath.Join(dir, "skills", "team-notes-extra"), 0o755))
			},
		},
		{
			name:   "team core's skill on team core's workspace",
			layers: `{skills: ["team-notes"], dest: "/opt/nlx/skills"}`,
			uses:   map[string]string{"workspaces.cue": "workspaces: core: {\n\timage: \"shared\"\n"},
			setup: func(t *testing.T, dir string) {
				must(t, os.Remove(filepath.Join(dir, "zeta.cue")))
			},
		},
		{
			name:   "a personal skill on its owner's personal workspace, with the team's",
			layers: `{skills: ["my-notes", "team-notes"], dest: "/opt/nlx/skills"}`,
			uses:   map[string]string{"workspaces.cue": "workspaces: ana: {\n\timage: \"shared\"\n"},
			setup: func(t *testing.T, dir string) {
				must(t, os.Remove(filepath.Join(dir, "zeta.cue")))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyTree(t, "testdata/base")
			must(t, os.WriteFile(filepath.Join(dir, "zeta.cue"), []byte(zetaWorkspace), 0o644))
			must(t, os.WriteFile(filepath.Join(dir, "images.cue"), []byte(sharedImage(tt.layers)), 0o644))
			for file, add := range tt.uses {
				applyEdits(t, dir, []edit{{file, "", "\n" + add + "}\n"}})
			}
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			_, err := loadBoth(t, dir)
			if tt.at == "" {
				if err != nil {
					t.Fatalf("got\n%v\nwant no error", err)
				}
				return
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("got %v, want Errors", err)
			}
			file, marker, _ := strings.Cut(tt.at, ":")
			want := markerPos(t, filepath.Join(dir, file), marker)
			var found []*Error
			for _, e := range errs {
				if e.Code == reason.ImageForeignSkills {
					found = append(found, e)
				}
			}
			if len(found) != 1 {
				t.Fatalf("got\n%v\nwant one %s error", err, reason.ImageForeignSkills)
			}
			e := found[0]
			if got := fmt.Sprintf("%s:%d:%d", e.Pos.Filename, e.Pos.Line, e.Pos.Column); got != want {
				t.Errorf("position: got %s, want %s (%v)", got, want, e)
			}
			for _, m := range tt.msg {
				if !strings.Contains(e.Msg, m) {
					t.Errorf("message %q lacks %q", e.Msg, m)
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
