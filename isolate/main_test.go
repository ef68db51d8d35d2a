package isolate

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if Reexec() {
		return
	}
	os.Exit(m.Run())
}
