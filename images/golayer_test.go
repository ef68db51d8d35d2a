package images

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/nlx-dev/nlx"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/schema"
)

// writeFiles writes name -> content under dir, as if an hour ago (files
// and the directories down to them): a record is not written for files
// modified while the go command may have been reading them (see
// TestNoRecordOfRacyFiles), and these tests are about what records say.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	writeFilesAt(t, dir, files, time.Now().Add(-time.Hour))
}

func writeFilesAt(t *testing.T, dir string, files map[string]string, mtime time.Time) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		for d := p; strings.HasPrefix(d, dir); d = filepath.Dir(d) {
			if err := os.Chtimes(d, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestNlxLayerIsTheCommand is the nlx layer's oracle: built from the source
// nlx carries, in a module of its own, it is byte for byte the layer a go
// layer gives building the command in the checkout itself.
func TestNlxLayerIsTheCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles nlx twice")
	}
	cache := &Cache{Dir: filepath.Join(t.TempDir(), "cache")}
	build := func(l schema.Layer, dir string) *Result {
		im := &schema.Image{Platforms: []string{"linux/amd64"}, Base: "scratch", Layers: []schema.Layer{l}}
		res, err := Build(context.Background(), Input{Name: "x", Image: im, ConfigDir: dir, Cache: cache,
			Self: nlx.Source, SelfEmbedded: true})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	nlxLayer := schema.Layer{Nlx: &schema.NlxLayer{}, Dest: "/usr/local/bin/nlx"}
	self := build(nlxLayer, t.TempDir())
	checkout := build(schema.Layer{Go: "github.com/nlx-dev/nlx/cmd/nlx", Dest: "/usr/local/bin/nlx"}, "..")
	if a, b := self.Platforms[0].Layers[0].Digest, checkout.Platforms[0].Layers[0].Digest; a != b {
		t.Fatalf("the nlx layer is %s, the go layer of the checkout's command %s", a, b)
	}
	// Embedded in this executable, the source is known by the executable's
	// identity: the next build finds the layer without the go command.
	again := build(nlxLayer, t.TempDir())
	if again.GoRuns != 0 || again.Digest != self.Digest {
		t.Errorf("again: %d go runs, digest %s, want 0 and %s", again.GoRuns, again.Digest, self.Digest)
	}
}

// TestGoLayerErrorsPositioned: a Go layer that cannot be built is a
// configuration error at its source field, code go_build, saying why.
func TestGoLayerErrorsPositioned(t *testing.T) {
	for d := t.TempDir(); ; d = filepath.Dir(d) {
		for _, f := range []string{"go.mod", "go.work"} {
			if _, err := os.Stat(filepath.Join(d, f)); err == nil {
				t.Skipf("%s is in a Go module or workspace (%s)", t.TempDir(), filepath.Join(d, f))
			}
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	image := func(layer string) string {
		return "package x\n\nimages: x: {\n\tplatforms: [\"linux/amd64\"]\n\tbase:      \"scratch\"\n\tlayers: [\n\t\t" + layer + ",\n\t]\n}\n"
	}
	tests := []struct {
		name  string
		files map[string]string
		path  string
		col   int
		msg   []string
		noSrc bool  // the build is given no source for nlx layers
		self  fs.FS // the source for nlx layers, if not nlx's
	}{
		{
			name:  "nlx's command from a config repository",
			files: map[string]string{"images.cue": image(`{go: "github.com/nlx-dev/nlx/cmd/nlx", dest: "/usr/local/bin/nlx"}`)},
			path:  "images.x.layers[0].go", col: 8,
			msg: []string{"go package github.com/nlx-dev/nlx/cmd/nlx cannot be built for linux/amd64", "is in no Go module",
				`{nlx: {}, dest: "/usr/local/bin/nlx"} puts this nlx in the image`},
		},
		{
			name: "a package the module does not have",
			files: map[string]string{"images.cue": image(`{go: "example.com/cfg/cmd/nope", dest: "/bin/x"}`),
				"go.mod": "module example.com/cfg\n\ngo 1.26\n"},
			path: "images.x.layers[0].go", col: 8,
			msg: []string{"go package example.com/cfg/cmd/nope cannot be built for linux/amd64 in", "cmd/nope"},
		},
		{
			name: "a package that does not compile",
			files: map[string]string{"images.cue": image(`{go: "example.com/cfg/cmd/bad", dest: "/bin/x"}`),
				"go.mod": "module example.com/cfg\n\ngo 1.26\n", "cmd/bad/main.go": "package main\n\nfunc main() { undefined() }\n"},
			path: "images.x.layers[0].go", col: 8,
			msg: []string{"go build example.com/cfg/cmd/bad for linux/amd64", "undefined: undefined"},
		},
		{
			name:  "an nlx layer without the source to build it",
			files: map[string]string{"images.cue": image(`{nlx: {}, dest: "/usr/local/bin/nlx"}`)},
			path:  "images.x.layers[0].nlx", col: 9,
			msg: []string{"carries no source"}, noSrc: true,
		},
		{
			name:  "an nlx source that does not compile",
			files: map[string]string{"images.cue": image(`{nlx: {}, dest: "/usr/local/bin/nlx"}`)},
			path:  "images.x.layers[0].nlx", col: 9,
			msg: []string{"go build of nlx (module example.com/broken) for linux/amd64", "undefined: nope"},
			self: fstest.MapFS{
				"go.mod":          {Data: []byte("module example.com/broken\n\ngo 1.26\n")},
				"cmd/nlx/main.go": {Data: []byte("package main\n\nfunc main() { nope() }\n")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, tt.files)
			cfg, err := schema.Load(context.Background(), dir)
			if err != nil {
				t.Fatal(err)
			}
			in := Input{Name: "x", Image: cfg.Images["x"], ConfigDir: dir, Cache: &Cache{Dir: filepath.Join(t.TempDir(), "cache")}, Self: nlx.Source}
			if tt.noSrc {
				in.Self = nil
			}
			if tt.self != nil {
				in.Self = tt.self
			}
			_, err = Build(context.Background(), in)
			var errs schema.Errors
			if !errors.As(err, &errs) || len(errs) != 1 {
				t.Fatalf("got %v, want one positioned error", err)
			}
			e := errs[0]
			if e.Pos.Filename != filepath.Join(dir, "images.cue") || e.Pos.Line != 7 || e.Pos.Column != tt.col || e.Path != tt.path || e.Code != reason.GoBuild {
				t.Errorf("got %s, want it at images.cue:7:%d, %s, %s", e, tt.col, tt.path, reason.GoBuild)
			}
			for _, m := range tt.msg {
				if !strings.Contains(e.Msg, m) {
					t.Errorf("message %q lacks %q", e.Msg, m)
				}
			}
			if strings.Contains(e.Error(), "\n") {
				t.Errorf("a positioned error is one line: %q", e.Error())
			}
			if reason.CodeOf(err) != reason.InvalidConfig {
				t.Errorf("code %s, want the config's %s", reason.CodeOf(err), reason.InvalidConfig)
			}
		})
	}
}

// hello is a small Go module whose command an image's go layer builds: a
// package in the module, an embedded file and a file its build excludes.
var hello = map[string]string{
	"go.mod":          "module example.com/hello\n\ngo 1.26\n",
	"main.go":         "package main\n\nimport (\n\t_ \"embed\"\n\n\t\"example.com/hello/lib\"\n)\n\n//go:embed data/msg.txt\nvar msg string\n\nfunc main() { println(lib.Greet(msg)) }\n",
	"lib/lib.go":      "package lib\n\nfunc Greet(s string) string { return \"hello \" + s }\n",
	"lib/ignored.go":  "//go:build ignore\n\npackage lib\n\nfunc init() { println(\"ignored\") }\n",
	"data/msg.txt":    "world\n",
	"assets/site.txt": "a file of a files layer\n",
}

// TestWarmResolutionOracle: an image with nothing changed is resolved from
// its records without running the go command, to exactly the digest of a
// full build; any change to anything that goes into it misses (the go
// command runs again), and what it then gives is again the digest of a
// full build from an empty cache.
func TestWarmResolutionOracle(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles a small command many times")
	}
	realGo, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	realGo, _ = filepath.EvalSymlinks(realGo)
	realRoot := filepath.Dir(filepath.Dir(realGo))
	base := t.TempDir()
	mod := filepath.Join(base, "hello")
	writeFiles(t, mod, hello)
	// A go command of its own, in a GOROOT-shaped directory, that the
	// test can change as an upgrade would.
	fakeRoot := filepath.Join(base, "goroot")
	writeFiles(t, fakeRoot, map[string]string{"bin/go": "#!/bin/sh\nexec " + realGo + " \"$@\"\n"})
	if err := os.Chmod(filepath.Join(fakeRoot, "bin", "go"), 0o755); err != nil {
		t.Fatal(err)
	}
	version, _ := os.ReadFile(filepath.Join(realRoot, "VERSION"))
	writeFiles(t, fakeRoot, map[string]string{"VERSION": string(version)})
	tools := filepath.Join("pkg", "tool", runtime.GOOS+"_"+runtime.GOARCH)
	os.MkdirAll(filepath.Join(fakeRoot, tools), 0o755)
	for _, tool := range []string{"compile", "link", "asm"} {
		if err := os.Symlink(filepath.Join(realRoot, tools, tool), filepath.Join(fakeRoot, tools, tool)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", filepath.Join(fakeRoot, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("GOROOT", "") // found from the go command, as by default
	os.Unsetenv("GOROOT")
	t.Setenv("GOFLAGS", "")

	im := &schema.Image{Platforms: []string{"linux/amd64"}, Base: "scratch", Layers: []schema.Layer{
		{Go: "example.com/hello", Dest: "/bin/hello"},
		{Files: "assets", Dest: "/srv"},
	}}
	epoch := time.Unix(0, 0).UTC()
	cache := &Cache{Dir: filepath.Join(base, "cache")}
	build := func(c *Cache) *Result {
		t.Helper()
		res, err := Build(context.Background(), Input{Name: "hello", Image: im, ConfigDir: mod, Cache: c, Epoch: epoch})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	fresh := 0
	full := func() string { // the oracle: a build from an empty cache
		t.Helper()
		fresh++
		res := build(&Cache{Dir: filepath.Join(base, "fresh", time.Now().Format("150405.000000000"))})
		if res.GoRuns == 0 {
			t.Fatal("a build from an empty cache ran no go command")
		}
		return res.Digest.String()
	}
	warmUp := func() {
		t.Helper()
		build(cache)
		if res := build(cache); res.GoRuns != 0 {
			t.Fatalf("nothing changed, yet the go command ran %d times", res.GoRuns)
		}
	}

	warmUp()
	if res := build(cache); res.GoRuns != 0 || res.Digest.String() != full() {
		t.Fatalf("warm resolution: %d go runs, digest %s; a full build gives %s", res.GoRuns, res.Digest, full())
	}

	edit := func(name, content string) func() {
		return func() { writeFiles(t, mod, map[string]string{name: content}) }
	}
	tests := []struct {
		name   string
		change func()
		noGo   bool // the change is to no Go input: no go command, the files layer rebuilt
	}{
		{"a source file of the package", edit("main.go", strings.Replace(hello["main.go"], "println(", "print(", 1)), false},
		{"a source file of a package it imports", edit("lib/lib.go", strings.Replace(hello["lib/lib.go"], "hello ", "hi ", 1)), false},
		{"a new source file of a package", edit("lib/extra.go", "package lib\n\nvar Extra = 1\n"), false},
		{"a file the build excluded, now included", edit("lib/ignored.go", strings.Replace(hello["lib/ignored.go"], "//go:build ignore\n\n", "", 1)), false},
		{"an embedded file", edit("data/msg.txt", "planet\n"), false},
		{"go.mod", edit("go.mod", hello["go.mod"]+"\n// a comment\n"), false},
		{"a go.work above the module", func() {
			writeFiles(t, base, map[string]string{"go.work": "go 1.26\n\nuse ./hello\n"})
		}, false},
		{"GOFLAGS", func() { t.Setenv("GOFLAGS", "-mod=mod") }, false},
		{"another variable of the Go environment", func() { t.Setenv("GOEXPERIMENT", "") }, false},
		{"the go command", func() {
			writeFiles(t, fakeRoot, map[string]string{"bin/go": "#!/bin/sh\n# upgraded\nexec " + realGo + " \"$@\"\n"})
		}, false},
		{"the Go version of the toolchain", func() {
			writeFiles(t, fakeRoot, map[string]string{"VERSION": string(version) + "\n"})
		}, false},
		{"the platform list", func() { im.Platforms = []string{"linux/amd64", "linux/arm64"} }, false},
		{"the epoch", func() { epoch = time.Unix(1700000000, 0).UTC() }, false},
		{"a file of a files layer", edit("assets/site.txt", "changed\n"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := build(cache)
			tt.change()
			res := build(cache)
			want := full()
			if res.Digest.String() != want {
				t.Errorf("after the change: digest %s, a full build gives %s", res.Digest, want)
			}
			switch {
			case tt.noGo:
				if res.Digest == before.Digest {
					t.Errorf("a changed layer file left the digest %s", res.Digest)
				}
				if l := res.Platforms[0].Layers[1]; l.Cached {
					t.Errorf("the files layer came from the cache after its file changed")
				}
			case res.GoRuns == 0:
				t.Errorf("the change did not miss: resolved without the go command")
			}
			// Then warm again, and still the digest of a full build.
			if again := build(cache); again.GoRuns != 0 || again.Digest.String() != want {
				t.Errorf("the build after: %d go runs, digest %s, want 0 and %s", again.GoRuns, again.Digest, want)
			}
		})
	}
	t.Logf("%d full builds", fresh)
}

// TestWarmNlxLayer: the nlx layer is resolved warm too, and misses when any
// file of the source it is built from changes.
func TestWarmNlxLayer(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles a small command")
	}
	src := fstest.MapFS{
		"go.mod":               {Data: []byte("module example.com/self\n\ngo 1.26\n")},
		"cmd/nlx/main.go":      {Data: []byte("package main\n\nfunc main() { println(\"self\") }\n")},
		"cmd/nlx/main_test.go": {Data: []byte("package main\n")},
	}
	im := &schema.Image{Platforms: []string{"linux/" + runtime.GOARCH}, Base: "scratch",
		Layers: []schema.Layer{{Nlx: &schema.NlxLayer{}, Dest: "/bin/nlx"}}}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		im.Platforms = []string{"linux/amd64"}
	}
	base := t.TempDir()
	cache := &Cache{Dir: filepath.Join(base, "cache")}
	build := func(c *Cache) *Result {
		t.Helper()
		res, err := Build(context.Background(), Input{Name: "self", Image: im, ConfigDir: base, Cache: c, Self: src})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := build(cache)
	if first.GoRuns == 0 {
		t.Fatal("the first build ran no go command")
	}
	if again := build(cache); again.GoRuns != 0 || again.Digest != first.Digest {
		t.Fatalf("nothing changed: %d go runs, digest %s, want 0 and %s", again.GoRuns, again.Digest, first.Digest)
	}
	src["cmd/nlx/main_test.go"] = &fstest.MapFile{Data: []byte("package main\n\n// changed\n")}
	if again := build(cache); again.GoRuns == 0 {
		t.Errorf("a file of the source changed, yet it was resolved without the go command")
	}
	src["cmd/nlx/main.go"] = &fstest.MapFile{Data: []byte("package main\n\nfunc main() { println(\"other\") }\n")}
	changed := build(cache)
	if changed.GoRuns == 0 || changed.Digest == first.Digest {
		t.Errorf("the source changed: %d go runs, digest %s (was %s)", changed.GoRuns, changed.Digest, first.Digest)
	}
	if want := build(&Cache{Dir: filepath.Join(base, "fresh")}); changed.Digest != want.Digest {
		t.Errorf("after the change: %s, a full build gives %s", changed.Digest, want.Digest)
	}
}

// TestNoRecordOfRacyFiles: a file the go command read that was modified
// since a second before the resolution began may have changed while it was
// read: no record is written, and every build runs the go command.
func TestNoRecordOfRacyFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles a small command")
	}
	mod := t.TempDir()
	writeFiles(t, mod, hello)
	writeFilesAt(t, mod, map[string]string{"lib/lib.go": hello["lib/lib.go"]}, time.Now().Add(time.Hour))
	im := &schema.Image{Platforms: []string{"linux/amd64"}, Base: "scratch", Layers: []schema.Layer{{Go: "example.com/hello", Dest: "/bin/hello"}}}
	cache := &Cache{Dir: filepath.Join(t.TempDir(), "cache")}
	for i := range 2 {
		res, err := Build(context.Background(), Input{Name: "hello", Image: im, ConfigDir: mod, Cache: cache})
		if err != nil {
			t.Fatal(err)
		}
		if res.GoRuns == 0 {
			t.Fatalf("build %d: resolved from a record vouching for a file modified during the resolution", i)
		}
	}
	if records, _ := os.ReadDir(filepath.Join(cache.Dir, "records")); len(records) != 0 {
		t.Errorf("records written: %v", records)
	}
}
