package state_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nlx-dev/nlx/internal/procid"
	"github.com/nlx-dev/nlx/internal/reason"
	"github.com/nlx-dev/nlx/reconcile"
	"github.com/nlx-dev/nlx/state"
)

func self(t *testing.T) procid.Identity {
	t.Helper()
	id, err := procid.Self()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// exitedProcess returns the identity, on this host and boot, of a child that
// ran and has been killed and reaped: certainly not running any more (were
// its pid recycled, the new process would have another start time).
func exitedProcess(t *testing.T) procid.Identity {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal("cannot start sleep:", err)
	}
	id := self(t)
	id.PID = cmd.Process.Pid
	start, err := procid.StartTime(id.PID)
	cmd.Process.Kill()
	cmd.Wait()
	if err != nil {
		t.Fatal(err)
	}
	id.Start = start
	return id
}

// plantLock writes a lock row as another nlx process would have.
func plantLock(t *testing.T, path string, h reconcile.Holder) {
	t.Helper()
	_, err := raw(t, path).Exec(`INSERT INTO locks (id, lock_id, operation, pid, pid_start, pid_ns, boot_id, host, user, acquired_at)
		VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, h.LockID, h.Operation, h.Process.PID, h.Process.Start, h.Process.PidNS, h.Process.Boot,
		h.Process.Host, h.Process.User, h.AcquiredAt.UTC().Format(time.RFC3339Nano))
	if err != nil {
		t.Fatal(err)
	}
}

func wantLocked(t *testing.T, err error, want reconcile.Holder) {
	t.Helper()
	var locked *reconcile.LockedError
	if !errors.As(err, &locked) {
		t.Fatalf("Lock: %v (%T), want *reconcile.LockedError", err, err)
	}
	got := locked.Holder
	if got.LockID != want.LockID || got.Operation != want.Operation || got.Process != want.Process || !got.AcquiredAt.Equal(want.AcquiredAt) {
		t.Errorf("LockedError.Holder:\n got %+v\nwant %+v", got, want)
	}
	msg := err.Error()
	for _, s := range []string{string(reason.StateLocked), "pid " + strconv.Itoa(want.Process.PID), want.Process.Host, want.LockID} {
		if !strings.Contains(msg, s) {
			t.Errorf("error %q does not name %q", msg, s)
		}
	}
}

func TestLockUnlock(t *testing.T) {
	ctx := context.Background()
	path := statePath(t)
	at := "2026-03-04T05:06:07Z"
	db := open(t, path, state.Options{Now: clock(at)})
	other := open(t, path, state.Options{}) // another *DB: as another nlx would see it

	if h, err := db.LockHolder(ctx); err != nil || h != nil {
		t.Fatalf("LockHolder of a new state = %+v, %v; want none", h, err)
	}
	lock, err := db.Lock(ctx, "apply")
	if err != nil {
		t.Fatal(err)
	}
	if lock.ID == "" || lock.TookOverFrom != nil {
		t.Errorf("Lock = %+v, want an id and no takeover", lock)
	}
	want := reconcile.Holder{LockID: lock.ID, Operation: "apply", Process: self(t), AcquiredAt: clock(at)()}
	h, err := other.LockHolder(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h == nil || h.LockID != want.LockID || h.Operation != want.Operation || h.Process != want.Process || !h.AcquiredAt.Equal(want.AcquiredAt) {
		t.Errorf("LockHolder:\n got %+v\nwant %+v", h, want)
	}

	// The holder (this process) is alive: nobody may take the lock, whether
	// through the same *DB or another.
	for name, d := range map[string]*state.DB{"same DB": db, "other DB": other} {
		got, err := d.Lock(ctx, "state unlock")
		if err == nil {
			t.Fatalf("%s: second Lock = %+v, want *reconcile.LockedError", name, got)
		}
		wantLocked(t, err, want)
	}

	if err := other.Unlock(ctx, "0123456789abcdef"); !errors.Is(err, state.ErrNotLocked) {
		t.Errorf("Unlock with a wrong id: %v, want ErrNotLocked", err)
	}
	if h, err := db.LockHolder(ctx); err != nil || h == nil || h.LockID != lock.ID {
		t.Errorf("after Unlock with a wrong id, LockHolder = %+v, %v; want lock %s still held", h, err, lock.ID)
	}
	if err := other.Unlock(ctx, lock.ID); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	if h, err := db.LockHolder(ctx); err != nil || h != nil {
		t.Errorf("after Unlock, LockHolder = %+v, %v; want none", h, err)
	}
	if err := db.Unlock(ctx, lock.ID); !errors.Is(err, state.ErrNotLocked) {
		t.Errorf("second Unlock: %v, want ErrNotLocked", err)
	}
	again, err := other.Lock(ctx, "apply")
	if err != nil {
		t.Fatalf("Lock after Unlock: %v", err)
	}
	if again.ID == lock.ID {
		t.Errorf("a new Lock reused id %s", again.ID)
	}
}

func TestLockTakeover(t *testing.T) {
	ctx := context.Background()
	me := self(t)
	dead := exitedProcess(t)
	otherHost := dead
	otherHost.Host = me.Host + ".elsewhere"
	reused := me
	reused.Start += "0" // this pid, but a process that started at another time
	rebooted := me
	rebooted.Boot = "00000000-0000-4000-8000-000000000000"
	// Same host and boot, but a pid of another pid namespace (another
	// container sharing the state): its pid cannot be checked from here.
	otherNS := dead
	otherNS.PidNS = "pid:[4026531999]"

	tests := []struct {
		name     string
		holder   procid.Identity
		takeover bool
	}{
		{"exited process", dead, true},
		{"recycled pid", reused, true},
		{"earlier boot", rebooted, true},
		{"this process, alive", me, false},
		{"another host, even with a dead pid", otherHost, false},
		{"another pid namespace, even with a dead pid", otherNS, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := statePath(t)
			db := open(t, path, state.Options{Now: clock("2026-05-06T07:08:09Z")})
			planted := reconcile.Holder{
				LockID:     "feedfacecafebeef",
				Operation:  "apply",
				Process:    tt.holder,
				AcquiredAt: clock("2026-01-01T00:00:00Z")(),
			}
			plantLock(t, path, planted)

			lock, err := db.Lock(ctx, "apply")
			if !tt.takeover {
				wantLocked(t, err, planted)
				if h, err := db.LockHolder(ctx); err != nil || h == nil || h.LockID != planted.LockID {
					t.Errorf("after the refused Lock, LockHolder = %+v, %v; want %s", h, err, planted.LockID)
				}
				return
			}
			if err != nil {
				t.Fatalf("Lock over a dead holder: %v", err)
			}
			from := lock.TookOverFrom
			if from == nil || from.LockID != planted.LockID || from.Operation != planted.Operation || from.Process != planted.Process || !from.AcquiredAt.Equal(planted.AcquiredAt) {
				t.Errorf("TookOverFrom:\n got %+v\nwant %+v", from, planted)
			}
			h, err := db.LockHolder(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if h == nil || h.LockID != lock.ID || h.Process != me {
				t.Errorf("after takeover, LockHolder = %+v; want lock %s held by %+v", h, lock.ID, me)
			}
			if err := db.Unlock(ctx, planted.LockID); !errors.Is(err, state.ErrNotLocked) {
				t.Errorf("Unlock of the taken-over id: %v, want ErrNotLocked", err)
			}
		})
	}
}

func TestLockRace(t *testing.T) {
	ctx := context.Background()
	path := statePath(t)
	const n = 8
	dbs := make([]*state.DB, n)
	for i := range dbs {
		dbs[i] = open(t, path, state.Options{})
	}
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		locks [n]*reconcile.Lock
		errs  [n]error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			locks[i], errs[i] = dbs[i].Lock(ctx, "apply "+strconv.Itoa(i))
		}()
	}
	close(start)
	wg.Wait()

	var winners []int
	for i := range n {
		if errs[i] == nil {
			winners = append(winners, i)
		}
	}
	if len(winners) != 1 {
		t.Fatalf("%d Locks succeeded (%v), want exactly 1; errors: %v", len(winners), winners, errs)
	}
	won := winners[0]
	for i, err := range errs {
		if i == won {
			continue
		}
		var locked *reconcile.LockedError
		if !errors.As(err, &locked) {
			t.Errorf("loser %d: %v (%T), want *reconcile.LockedError", i, err, err)
			continue
		}
		if got, want := locked.Holder.LockID, locks[won].ID; got != want {
			t.Errorf("loser %d was told lock %s holds the state, want %s", i, got, want)
		}
		if got, want := locked.Holder.Process.PID, os.Getpid(); got != want {
			t.Errorf("loser %d was told pid %d holds the state, want %d", i, got, want)
		}
	}
	if got := queryInt(t, raw(t, path), `SELECT count(*) FROM locks`); got != 1 {
		t.Errorf("%d lock rows, want 1", got)
	}
}

// TestSnapshotWhileChanging: a plan's snapshot is refused while a live apply
// or resolve holds the lock (the serial was bumped when it began, so a plan
// of its half-made changes would pass apply's stale check once it ends, and
// apply them again); it is taken while another operation holds it, or a
// holder proven dead left the state as it will stay. The holder's own
// snapshot needs its lock.
func TestSnapshotWhileChanging(t *testing.T) {
	ctx := context.Background()
	dead := exitedProcess(t)
	tests := []struct {
		name, op string
		holder   procid.Identity
		refused  bool
	}{
		{"live apply", "apply", self(t), true},
		{"live resolve", "resolve", self(t), true},
		{"live approve", "approve", self(t), false},
		{"dead apply", "apply", dead, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := statePath(t)
			db := open(t, path, state.Options{})
			h := reconcile.Holder{LockID: "feedfacefeedface", Operation: tt.op, Process: tt.holder, AcquiredAt: time.Now()}
			plantLock(t, path, h)
			_, err := db.Snapshot(ctx)
			if tt.refused {
				wantLocked(t, err, h)
				if !strings.Contains(err.Error(), "is changing the state") {
					t.Errorf("error %q does not say the state is being changed", err)
				}
			} else if err != nil {
				t.Errorf("Snapshot: %v, want a snapshot", err)
			}
			if _, err := db.SnapshotLocked(ctx, h.LockID); err != nil {
				t.Errorf("SnapshotLocked by the holder: %v", err)
			}
			if _, err := db.SnapshotLocked(ctx, "0000000000000000"); !errors.Is(err, state.ErrNotLocked) {
				t.Errorf("SnapshotLocked by another: %v, want ErrNotLocked", err)
			}
		})
	}
}
