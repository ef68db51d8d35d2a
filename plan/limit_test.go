package plan

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/reason"
)

// TestReadFileRefusesWhatIsNotAPlanFile: nlx show /dev/zero ran out of
// memory, a FIFO hung it whatever signal it got, and a file of any size was
// read whole. Each is refused at once, before its content is read.
func TestReadFileRefusesWhatIsNotAPlanFile(t *testing.T) {
	dir := t.TempDir()
	plan := encode(t, representativePlan(t))
	limit := int64(len(plan)) // exactly the plan: it still reads
	t.Setenv(EnvMaxPlanBytes, strconv.FormatInt(limit, 10))
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		code reason.Code
		msg  string
	}{
		{"a plan at the limit", write("plan.json", plan), "", ""},
		{"/dev/zero", "/dev/zero", reason.InvalidPlanFile, "/dev/zero is not a regular file (a character device)"},
		{"/dev/urandom", "/dev/urandom", reason.InvalidPlanFile, "/dev/urandom is not a regular file (a character device)"},
		{"a FIFO with no writer", fifo, reason.InvalidPlanFile, "is not a regular file (a FIFO)"},
		{"a directory", dir, reason.InvalidPlanFile, "is not a regular file (a directory)"},
		{"one byte over the limit", write("big.json", append(bytes.Clone(plan), ' ')), reason.PlanTooLarge,
			"big.json is larger than " + strconv.FormatInt(limit, 10) + " bytes, the largest plan nlx reads; set NLX_MAX_PLAN_BYTES higher"},
		{"a symbolic link to a device", func() string {
			p := filepath.Join(dir, "link")
			if err := os.Symlink("/dev/zero", p); err != nil {
				t.Fatal(err)
			}
			return p
		}(), reason.InvalidPlanFile, "not a regular file (a character device)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				_, err := ReadFile(tt.path)
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatalf("ReadFile(%s) did not return", tt.path)
			}
			if code := refusalCode(t, err); code != tt.code {
				t.Fatalf("ReadFile(%s): code %q (%v), want %q", tt.path, code, err, tt.code)
			}
			if err != nil && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("ReadFile(%s): %v, want it to say %q", tt.path, err, tt.msg)
			}
		})
	}
}

// TestReadStopsAtTheLimit: Read of a stream reads one byte past the limit
// and no more.
func TestReadStopsAtTheLimit(t *testing.T) {
	plan := encode(t, representativePlan(t))
	t.Setenv(EnvMaxPlanBytes, strconv.Itoa(len(plan)))
	if _, err := Read(bytes.NewReader(plan)); err != nil {
		t.Fatalf("a plan at the limit: %v", err)
	}
	over := &countingReader{r: bytes.NewReader(append(bytes.Clone(plan), make([]byte, 1<<20)...))}
	_, err := Read(over)
	if code := refusalCode(t, err); code != reason.PlanTooLarge {
		t.Fatalf("Read of a stream over the limit: code %q (%v), want %q", code, err, reason.PlanTooLarge)
	}
	if over.n != int64(len(plan))+1 {
		t.Errorf("Read took %d bytes of the stream, want the limit plus one (%d)", over.n, len(plan)+1)
	}
	zero, err := os.Open("/dev/zero")
	if err != nil {
		t.Fatal(err)
	}
	defer zero.Close()
	if _, err := Read(zero); refusalCode(t, err) != reason.PlanTooLarge {
		t.Errorf("Read(/dev/zero): %v, want %s", err, reason.PlanTooLarge)
	}
}

type countingReader struct {
	r *bytes.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestMaxPlanBytes(t *testing.T) {
	tests := []struct {
		env  string
		want int64
		ok   bool
	}{
		{"", DefaultMaxPlanBytes, true},
		{"1000", 1000, true},
		{"256Mi", 256 << 20, true},
		{"1Gi", 1 << 30, true},
		{"lots", 0, false},
		{"-5", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(EnvMaxPlanBytes, tt.env)
			got, err := MaxPlanBytes()
			if (err == nil) != tt.ok || got != tt.want {
				t.Fatalf("MaxPlanBytes with %s=%q: %d, %v; want %d (ok %v)", EnvMaxPlanBytes, tt.env, got, err, tt.want, tt.ok)
			}
			if !tt.ok {
				if _, err := ReadFile("/dev/null"); err == nil || !strings.Contains(err.Error(), EnvMaxPlanBytes) {
					t.Errorf("ReadFile with a bad setting: %v, want an error naming %s", err, EnvMaxPlanBytes)
				}
			}
		})
	}
}
