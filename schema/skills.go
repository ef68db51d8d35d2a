package schema

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"

	"github.com/nlx-dev/nlx/internal/reason"
	"go.yaml.in/yaml/v3"
)

// skillFrontmatter is the part of SKILL.md's YAML frontmatter nlx checks (the
// Agent Skills format); other keys (license, allowed-tools, metadata, ...)
// are allowed and ignored.
type skillFrontmatter struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
}

// loadSkills reads every skill package, records its files as inputs and fills
// each Skill's Description and Digest.
func (l *loader) loadSkills(cfg *Config) {
	for _, name := range slices.Sorted(maps.Keys(cfg.Skills)) {
		s := cfg.Skills[name]
		sel := at("skills", name, "path")
		rel := path.Clean(filepath.ToSlash(s.Path))
		digest, err := walkTree(l.root, rel, &l.inputs)
		if err != nil {
			l.addAt(sel, reason.SkillPackage, "skill package: %v", err)
			continue
		}
		l.inputs.Dirs = append(l.inputs.Dirs, rel)
		s.Digest = digest
		md := path.Join(rel, "SKILL.md")
		fm, err := readFrontmatter(l.root, md, l.inputs.sumOf(md))
		if err != nil {
			l.addAt(sel, reason.SkillPackage, "skill package %s: %v", rel, err)
			continue
		}
		switch {
		case !validSkillName(fm.Name):
			l.addAt(sel, reason.SkillPackage, "SKILL.md name %q must be 1-64 characters of a-z, 0-9 and -", fm.Name)
		case fm.Name != path.Base(rel):
			l.addAt(sel, reason.SkillPackage, "SKILL.md name %q does not match its directory %q", fm.Name, path.Base(rel))
		case fm.Name != name:
			l.addAt(sel, reason.SkillPackage, "SKILL.md name %q does not match the resource name %q", fm.Name, name)
		}
		if n := len([]rune(fm.Description)); n < 1 || n > 1024 {
			l.addAt(sel, reason.SkillPackage, "SKILL.md description must be 1-1024 characters, has %d", n)
		}
		s.Description = fm.Description
	}
}

// readFrontmatter reads the frontmatter of file, which must be the content
// the package's digest was computed from (sum, its SHA-256 in hex): what is
// checked is what is hashed.
func readFrontmatter(root *os.Root, file, sum string) (*skillFrontmatter, error) {
	data, _, err := readRegular(root, file, 0)
	if err != nil {
		return nil, fmt.Errorf("read SKILL.md: %w", err)
	}
	if got := sha256.Sum256(data); hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("read SKILL.md: %w", errChanged)
	}
	return parseFrontmatter(data)
}

// CheckSkillMD checks a SKILL.md against the Agent Skills format for a
// package in a directory named dir: its name and description, and what is
// wrong with it (nothing when problems is empty).
func CheckSkillMD(data []byte, dir string) (name, description string, problems []string) {
	fm, err := parseFrontmatter(data)
	if err != nil {
		return "", "", []string{err.Error()}
	}
	switch {
	case !validSkillName(fm.Name):
		problems = append(problems, fmt.Sprintf("SKILL.md name %q must be 1-64 characters of a-z, 0-9 and -", fm.Name))
	case fm.Name != dir:
		problems = append(problems, fmt.Sprintf("SKILL.md name %q does not match its directory %q", fm.Name, dir))
	}
	if n := len([]rune(fm.Description)); n < 1 || n > 1024 {
		problems = append(problems, fmt.Sprintf("SKILL.md description must be 1-1024 characters, has %d", n))
	}
	return fm.Name, fm.Description, problems
}

func parseFrontmatter(data []byte) (*skillFrontmatter, error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff"))
	rest, ok := bytes.CutPrefix(data, []byte("---\n"))
	if !ok {
		rest, ok = bytes.CutPrefix(data, []byte("---\r\n"))
	}
	if !ok {
		return nil, fmt.Errorf("SKILL.md must start with YAML frontmatter between --- lines")
	}
	end := bytes.Index(rest, []byte("\n---"))
	if end < 0 {
		return nil, fmt.Errorf("SKILL.md frontmatter is not closed by a --- line")
	}
	var fm skillFrontmatter
	if err := yaml.Unmarshal(rest[:end+1], &fm); err != nil {
		return nil, fmt.Errorf("SKILL.md frontmatter: %w", err)
	}
	return &fm, nil
}

func validSkillName(s string) bool {
	if len(s) < 1 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}
