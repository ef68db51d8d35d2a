package schema

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/nlx-dev/nlx/internal/reason"
)

// What an image carries of the config's skills. A built image carries a
// skill when one of its layers
//
//   - is a skills layer naming it, or
//   - is a files layer whose source directory is the skill package's
//     directory, contains it, or lies inside it: compared as paths (after
//     cleaning) and as directories of the file system (symbolic links inside
//     the config directory resolved), so that a source reaching the package
//     through a link counts too.
//
// A workspace may run on an image only if it is entitled to every skill
// the image carries (skillEntitled); workspace skills are mounted per
// launch, never baked into an image every workspace using it would see.

// carriedSkill is one skill an image carries, and the layer that does.
type carriedSkill struct {
	skill string
	layer int
	how   string // "skills" or "files DIR"
}

// skillEntitled reports whether workspace w may see skill sk: a team skill
// belongs to w's team; a personal skill to the owner of a personal
// workspace (the rule checkSkillUse applies to what w names).
func skillEntitled(w *Workspace, sk *Skill) bool {
	switch sk.Scope {
	case "team":
		return sk.Owner == w.Team
	case "personal":
		return w.Kind == "personal" && sk.Owner == w.Owner
	}
	return false
}

// checkImageSkills refuses every workspace whose image carries a team or
// personal skill the workspace is not entitled to, at the workspace's image
// field, naming each such skill and the layer carrying it.
func (l *loader) checkImageSkills(cfg *Config) {
	carried := map[string][]carriedSkill{}
	for _, name := range slices.Sorted(maps.Keys(cfg.Workspaces)) {
		w := cfg.Workspaces[name]
		im := cfg.Images[w.Image]
		if im == nil {
			continue // no image, or a dangling_reference already
		}
		cs, ok := carried[w.Image]
		if !ok {
			cs = l.imageSkills(cfg, im)
			carried[w.Image] = cs
		}
		var foreign []string
		seen := map[string]bool{}
		for _, c := range cs {
			sk := cfg.Skills[c.skill]
			if skillEntitled(w, sk) || seen[c.skill] {
				continue
			}
			seen[c.skill] = true
			whose := fmt.Sprintf("team %s's", sk.Owner)
			if sk.Scope == "personal" {
				whose = fmt.Sprintf("%s's personal", sk.Owner)
			}
			foreign = append(foreign, fmt.Sprintf("%s skill %q (layer %d, %s)", whose, c.skill, c.layer, c.how))
		}
		if len(foreign) == 0 {
			continue
		}
		who := "team " + w.Team
		if w.Kind == "personal" {
			who = w.Owner + "'s personal workspace"
		}
		l.addAt(at("workspaces", name, "image"), reason.ImageForeignSkills,
			"image %q carries %s, which this workspace (%s) is not entitled to; workspace skills are mounted per launch, never baked into an image",
			w.Image, strings.Join(foreign, ", "), who)
	}
}

// imageSkills lists the skills im carries, in layer order.
func (l *loader) imageSkills(cfg *Config, im *Image) []carriedSkill {
	var out []carriedSkill
	names := slices.Sorted(maps.Keys(cfg.Skills))
	for i, layer := range im.Layers {
		for _, s := range layer.Skills {
			if cfg.Skills[s] != nil {
				out = append(out, carriedSkill{skill: s, layer: i, how: "skills"})
			}
		}
		if layer.Files == "" || checkRelative(layer.Files) != nil {
			continue
		}
		for _, s := range names {
			if l.overlaps(layer.Files, cfg.Skills[s].Path) {
				out = append(out, carriedSkill{skill: s, layer: i, how: "files " + layer.Files})
			}
		}
	}
	return out
}

// overlaps reports whether the files layer source src and the skill package
// directory pkg (both relative to the config directory) are the same
// directory or one lies inside the other.
func (l *loader) overlaps(src, pkg string) bool {
	a, b := path.Clean(filepath.ToSlash(src)), path.Clean(filepath.ToSlash(pkg))
	if within(a, b) || within(b, a) {
		return true
	}
	if l.root == nil || checkRelative(pkg) != nil {
		return false
	}
	ai, aerr := l.root.Stat(a)
	bi, berr := l.root.Stat(b)
	if aerr != nil || berr != nil {
		return false
	}
	return l.below(b, ai) || l.below(a, bi)
}

// within reports whether the clean relative path p is dir or lies inside it.
func within(p, dir string) bool {
	return dir == "." || p == dir || strings.HasPrefix(p, dir+"/")
}

// maxClimb bounds how far below reports climbs: deeper than any config.
const maxClimb = 256

// below reports whether the directory at p (relative to the config root),
// or one of the directories above it as the file system has them (".."
// resolved after the links inside the config directory), is dir.
func (l *loader) below(p string, dir fs.FileInfo) bool {
	top, err := l.root.Stat(".")
	if err != nil {
		return false
	}
	for range maxClimb {
		fi, err := l.root.Stat(p)
		if err != nil {
			return false
		}
		if os.SameFile(fi, dir) {
			return true
		}
		if os.SameFile(fi, top) {
			return false
		}
		p += "/.."
	}
	return false
}
