package store

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/clawrl/clawrl/atomicfile"
)

// One daemon owns a data directory: `clawrl serve` takes the directory's
// lock (LockDir) before it loads anything and holds it until it exits, so a
// second daemon on the same directory is refused at once, naming the
// first. The lock is an flock(2) on LockName, which the kernel releases
// when the process dies however it dies (kill -9 included): a stale lock
// file never keeps a directory locked. Commands that only read (data
// stats, data export, weights list) take no lock and work beside a running
// daemon; commands that change what the daemon owns (weights rollback)
// ask Owner first.

// LockName is the lock file inside the data directory.
const LockName = "daemon.lock"

// ErrLocked is wrapped by LockDir's error when another process holds the
// directory.
var ErrLocked = errors.New("the data directory is in use")

// DirLock is a held lock on a data directory.
type DirLock struct {
	f     *os.File
	dir   string
	since time.Time
}

// Holder is what the process holding a data directory's lock wrote into
// the lock file.
type Holder struct {
	PID   int
	Since time.Time
	// Addr is the daemon's API address (host:port), once it listens
	// (DirLock.Announce); "" before.
	Addr string
}

// LockDir takes the lock of data directory dir (made if missing) for this
// process, and writes the process's pid into the lock file. If another
// process holds it, the error wraps ErrLocked and names that process's pid
// and the directory.
func LockDir(dir string) (*DirLock, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, LockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: lock file %s: %w (set data.dir to a writable directory)", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, lockedError(dir)
		}
		return nil, fmt.Errorf("store: locking %s: %w", path, err)
	}
	l := &DirLock{f: f, dir: dir, since: time.Now()}
	if err := l.write(""); err != nil {
		f.Close()
		return nil, err
	}
	return l, nil
}

// write puts the holder's pid, start time and API address into the file.
func (l *DirLock) write(addr string) error {
	stamp := fmt.Sprintf("%d\n%s\n%s\n", os.Getpid(), l.since.UTC().Format(time.RFC3339), addr)
	err := l.f.Truncate(0)
	if err == nil {
		_, err = l.f.WriteAt([]byte(stamp), 0)
	}
	if err != nil {
		return fmt.Errorf("store: writing %s: %w", l.f.Name(), err)
	}
	return nil
}

// Announce records the daemon's API address (host:port) in the lock file,
// where commands that must go through the daemon find it (Owner).
func (l *DirLock) Announce(addr string) error { return l.write(addr) }

// lockedError says who holds dir.
func lockedError(dir string) error {
	if h, ok := readLock(dir); ok {
		at := ""
		if h.Addr != "" {
			at = ", serving " + h.Addr
		}
		return fmt.Errorf("%w: %s is held by another clawrl daemon (pid %d%s, since %s); stop it first, or give this one another data directory (serve --data-dir DIR, or data.dir)",
			ErrLocked, dir, h.PID, at, h.Since.Local().Format(time.DateTime))
	}
	return fmt.Errorf("%w: %s is held by another clawrl daemon; stop it first, or give this one another data directory (serve --data-dir DIR, or data.dir)", ErrLocked, dir)
}

// readLock reads what the holder wrote.
func readLock(dir string) (Holder, bool) {
	raw, err := os.ReadFile(filepath.Join(dir, LockName))
	if err != nil {
		return Holder{}, false
	}
	lines := strings.Split(string(raw), "\n")
	if len(lines) < 3 {
		return Holder{}, false
	}
	var h Holder
	if h.PID, err = strconv.Atoi(strings.TrimSpace(lines[0])); err != nil {
		return Holder{}, false
	}
	h.Since, _ = time.Parse(time.RFC3339, strings.TrimSpace(lines[1]))
	h.Addr = strings.TrimSpace(lines[2])
	return h, true
}

// Owner reports whether a process holds data directory dir's lock, and
// what it wrote (a zero Holder when that could not be read). It takes and
// releases the lock to find out, so it must not be called by the holder.
func Owner(dir string) (h Holder, held bool, err error) {
	path := filepath.Join(dir, LockName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, fmt.Errorf("store: lock file %s: %w", path, err)
	}
	defer f.Close()
	switch err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); {
	case err == nil:
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return Holder{}, false, nil
	case errors.Is(err, syscall.EWOULDBLOCK):
		h, _ := readLock(dir)
		return h, true, nil
	default:
		return Holder{}, false, fmt.Errorf("store: probing %s: %w", path, err)
	}
}

// Dir is the locked directory.
func (l *DirLock) Dir() string { return l.dir }

// Close releases the lock. The lock file stays (removing it would let a
// process that opened it meanwhile lock a file nobody else sees).
func (l *DirLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	err := l.f.Close()
	l.f = nil
	return err
}

// IDKeyName is the file in the data directory that holds the secret under
// which the server hashes the session ids clients give.
const IDKeyName = "id.key"

// IDKey returns the data directory's id-hashing secret (32 random bytes),
// creating it on first use (mode 0600, written whole or not at all). The
// daemon holds the directory's lock when it calls this.
func IDKey(dir string) ([]byte, error) {
	path := filepath.Join(dir, IDKeyName)
	key, err := os.ReadFile(path)
	switch {
	case err == nil && len(key) == 32:
		return key, nil
	case err == nil:
		return nil, fmt.Errorf("store: %s holds %d bytes, not a 32-byte key; restore it from a backup (session ids hashed under it cannot be matched without it), or delete it to start hashing under a new key", path, len(key))
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("store: a new id key: %w", err)
	}
	if err := atomicfile.WriteFile(path, 0o600, func(w io.Writer) error { _, err := w.Write(key); return err }); err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	return key, nil
}
