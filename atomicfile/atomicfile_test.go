package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

var errWrite = errors.New("disk on fire")

// entries lists the names in dir, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func TestWriteFile(t *testing.T) {
	big := strings.Repeat("0123456789abcdef", 3*bufSize/16+5) // more than the buffer
	for _, tt := range []struct {
		name    string
		old     *string // contents before, nil: no file
		oldPerm os.FileMode
		perm    os.FileMode
		write   func(io.Writer) error
		bytes   *string // WriteBytes instead of WriteFile
		want    string  // contents after
		wantErr error
	}{
		{name: "new file", perm: 0o644, write: writeString("hello\n"), want: "hello\n"},
		{name: "new empty file", perm: 0o644, write: func(io.Writer) error { return nil }, want: ""},
		{name: "perm 0600", perm: 0o600, write: writeString("secret"), want: "secret"},
		{name: "perm 0666 not narrowed by the umask", perm: 0o666, write: writeString("x"), want: "x"},
		{name: "perm 0755", perm: 0o755, write: writeString("#!/bin/sh\n"), want: "#!/bin/sh\n"},
		{name: "larger than the buffer, in pieces", perm: 0o644, write: func(w io.Writer) error {
			for i := 0; i < len(big); i += 1000 {
				if _, err := io.WriteString(w, big[i:min(i+1000, len(big))]); err != nil {
					return err
				}
			}
			return nil
		}, want: big},
		{name: "existing file replaced whole", old: new("a much longer old content\n"), oldPerm: 0o600, perm: 0o644,
			write: writeString("new\n"), want: "new\n"},
		{name: "bytes", perm: 0o640, bytes: new("some bytes"), want: "some bytes"},
		{name: "bytes replace", old: new("old old old"), oldPerm: 0o644, perm: 0o644, bytes: new("b"), want: "b"},
		{name: "failing write leaves no file", perm: 0o644, write: failAfter("partial"), wantErr: errWrite},
		{name: "failing write keeps the old file", old: new("old\n"), oldPerm: 0o640, perm: 0o644,
			write: failAfter(big), want: "old\n", wantErr: errWrite},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "f.json")
			if tt.old != nil {
				if err := os.WriteFile(path, []byte(*tt.old), tt.oldPerm); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(path, tt.oldPerm); err != nil {
					t.Fatal(err)
				}
			}
			var err error
			if tt.bytes != nil {
				err = WriteBytes(path, tt.perm, []byte(*tt.bytes))
			} else {
				err = WriteFile(path, tt.perm, tt.write)
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.HasPrefix(err.Error(), path+": ") {
					t.Fatalf("error %v, want one wrapping %v that starts with the path", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			// Only the file itself may be there: no temporary file.
			names := entries(t, dir)
			if tt.wantErr != nil && tt.old == nil {
				if len(names) != 0 {
					t.Fatalf("failed write left %q", names)
				}
				return
			}
			if len(names) != 1 || names[0] != "f.json" {
				t.Fatalf("directory holds %q, want only f.json", names)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("contents %.40q (%d bytes), want %.40q (%d bytes)", got, len(got), tt.want, len(tt.want))
			}
			wantPerm := tt.perm
			if tt.wantErr != nil {
				wantPerm = tt.oldPerm
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if runtime.GOOS != "windows" && fi.Mode().Perm() != wantPerm {
				t.Errorf("mode %v, want %v", fi.Mode().Perm(), wantPerm)
			}
		})
	}
}

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

// failAfter writes s, then fails.
func failAfter(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		if _, err := io.WriteString(w, s); err != nil {
			return err
		}
		return errWrite
	}
}

func TestWriteFileMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "no", "such", "f")
	err := WriteFile(path, 0o644, writeString("x"))
	if err == nil || !strings.HasPrefix(err.Error(), path+": ") {
		t.Fatalf("error %v, want one naming %s", err, path)
	}
}

func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct {
		dir string
		ok  bool
	}{{dir, true}, {filepath.Join(dir, "missing"), false}} {
		err := SyncDir(tt.dir)
		if (err == nil) != tt.ok {
			t.Errorf("SyncDir(%s) = %v, want ok %v", tt.dir, err, tt.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), tt.dir+": ") {
			t.Errorf("error %v does not start with the directory", err)
		}
	}
}

func TestReplaceDir(t *testing.T) {
	for _, tt := range []struct {
		name    string
		final   string // contents of final/x before; "" = no final
		aside   bool   // pass an aside path
		stale   bool   // aside exists beforehand
		noTmp   bool   // tmp is missing, so its rename fails
		wantErr bool
		want    string // final/x after
	}{
		{name: "new", want: "new"},
		{name: "new with aside", aside: true, want: "new"},
		{name: "replaces", final: "old", aside: true, want: "new"},
		{name: "replaces, removing a stale aside", final: "old", aside: true, stale: true, want: "new"},
		{name: "stale aside and no final", aside: true, stale: true, want: "new"},
		{name: "existing, no aside", final: "old", wantErr: true, want: "old"},
		{name: "missing tmp leaves the old", final: "old", aside: true, noTmp: true, wantErr: true, want: "old"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			tmp, final, aside := filepath.Join(root, ".tmp"), filepath.Join(root, "ckpt"), ""
			mk := func(dir, x string) {
				t.Helper()
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := WriteBytes(filepath.Join(dir, "x"), 0o644, []byte(x)); err != nil {
					t.Fatal(err)
				}
			}
			if !tt.noTmp {
				mk(tmp, "new")
			}
			if tt.final != "" {
				mk(final, tt.final)
			}
			if tt.aside {
				aside = filepath.Join(root, "ckpt.old")
			}
			if tt.stale {
				mk(aside, "stale")
			}
			err := ReplaceDir(tmp, final, aside)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ReplaceDir: %v, want error %v", err, tt.wantErr)
			}
			got, rerr := os.ReadFile(filepath.Join(final, "x"))
			if rerr != nil || string(got) != tt.want {
				t.Fatalf("final/x = %q, %v; want %q", got, rerr, tt.want)
			}
			names := entries(t, root)
			switch {
			case !tt.wantErr && (len(names) != 1 || names[0] != "ckpt"):
				t.Errorf("root holds %q, want only ckpt (no tmp, no aside)", names)
			case tt.wantErr && !tt.noTmp && len(names) != 2:
				t.Errorf("root holds %q, want ckpt and the untouched tmp", names)
			case tt.wantErr && tt.noTmp && (len(names) != 1 || names[0] != "ckpt"):
				t.Errorf("root holds %q, want only the restored ckpt", names)
			}
		})
	}
}

// TestReplaceDirRestores makes the second rename fail (a directory cannot
// move into itself) and checks that the old final is put back.
func TestReplaceDirRestores(t *testing.T) {
	root := t.TempDir()
	tmp := filepath.Join(root, "tmp")
	final := filepath.Join(tmp, "ckpt")
	for _, d := range []string{tmp, final} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteBytes(filepath.Join(final, "x"), 0o644, []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := ReplaceDir(tmp, final, filepath.Join(root, "aside")); err == nil {
		t.Fatal("moving a directory into itself succeeded")
	}
	if got, err := os.ReadFile(filepath.Join(final, "x")); err != nil || string(got) != "old" {
		t.Fatalf("final/x = %q, %v; want the old copy back", got, err)
	}
	if names := entries(t, root); len(names) != 1 || names[0] != "tmp" {
		t.Errorf("root holds %q, want only tmp", names)
	}
}
