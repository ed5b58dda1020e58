package store

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestLockDir(t *testing.T) {
	dir := t.TempDir() + "/data"
	if _, held, err := Owner(dir); held || err != nil {
		t.Fatalf("a new directory is held: %v, %v", held, err)
	}
	l, err := LockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	h, held, err := Owner(dir)
	if !held || h.PID != os.Getpid() || h.Addr != "" || err != nil {
		t.Errorf("Owner = %+v, %v, %v; want this process", h, held, err)
	}
	if err := l.Announce("127.0.0.1:30001"); err != nil {
		t.Fatal(err)
	}
	if h, _, _ := Owner(dir); h.Addr != "127.0.0.1:30001" || h.PID != os.Getpid() {
		t.Errorf("after Announce: %+v", h)
	}
	_, err = LockDir(dir)
	if !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second lock: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, held, _ := Owner(dir); held {
		t.Error("held after Close")
	}
	l2, err := LockDir(dir)
	if err != nil {
		t.Fatalf("relock after Close: %v", err)
	}
	l2.Close()
}

// TestLockDiesWithTheProcess: a daemon killed with SIGKILL leaves its lock
// file behind but not its lock.
func TestLockDiesWithTheProcess(t *testing.T) {
	if os.Getenv("CLAWRL_LOCK_HELPER") != "" {
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelperProcess$")
	cmd.Env = append(os.Environ(), "CLAWRL_LOCK_HELPER="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n') // the helper says when it holds the lock
	if err != nil || strings.TrimSpace(line) != "locked" {
		cmd.Process.Kill()
		t.Fatalf("helper: %q, %v", line, err)
	}
	h, held, err := Owner(dir)
	if !held || h.PID != cmd.Process.Pid || err != nil {
		t.Errorf("Owner = %+v, %v, %v; want the helper %d", h, held, err, cmd.Process.Pid)
	}
	if _, err := LockDir(dir); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Errorf("lock beside the helper: %v", err)
	}
	cmd.Process.Kill()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("the helper did not die")
	}
	l, err := LockDir(dir)
	if err != nil {
		t.Fatalf("the lock outlived its SIGKILLed holder: %v", err)
	}
	l.Close()
}

// TestLockHelperProcess holds the lock of $CLAWRL_LOCK_HELPER until killed
// (run by TestLockDiesWithTheProcess).
func TestLockHelperProcess(t *testing.T) {
	dir := os.Getenv("CLAWRL_LOCK_HELPER")
	if dir == "" {
		t.Skip("a helper of TestLockDiesWithTheProcess")
	}
	if _, err := LockDir(dir); err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println("locked")
	time.Sleep(time.Hour)
}
