// Package atomicfile writes files and directories so that a path holds
// either its old contents or all of the new ones, never a part: not after
// a crash, not to another process reading meanwhile.
//
// A file (WriteFile, WriteBytes) is written to a temporary file in the same
// directory, which is fsynced, closed, renamed over the path, and followed
// by an fsync of the directory, so that the rename itself survives a
// crash. A directory of several files is built under a temporary name with
// each file synced (written with WriteFile, or fsynced by its writer), and
// ReplaceDir then fsyncs it, renames it into place and fsyncs its parent.
//
// It is the one implementation of write-fsync-rename in the project:
// safetensors files, the tokenizer's files, checkpoints (package weights),
// pretraining runs and the extracted bundled model all go through it.
package atomicfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// bufSize is the buffer WriteFile puts between write and the file.
const bufSize = 1 << 20

// WriteFile creates or replaces path with the bytes that write produces
// (through a 1 MiB buffer), with permission bits perm, exactly: they are
// set with chmod, so the umask does not narrow them. The bytes go to a
// temporary file ".<name>.tmp-*" beside path, which is fsynced, renamed
// over path, and followed by an fsync of path's directory. On any error
// the temporary file is removed and path keeps what it held (or stays
// absent). Errors start with path and wrap the cause (write's error
// included).
func WriteFile(path string, perm os.FileMode, write func(w io.Writer) error) error {
	return writeFile(path, perm, func(f *os.File) error {
		bw := bufio.NewWriterSize(f, bufSize)
		if err := write(bw); err != nil {
			return err
		}
		return bw.Flush()
	})
}

// WriteBytes is WriteFile with the bytes given: the atomic os.WriteFile.
func WriteBytes(path string, perm os.FileMode, data []byte) error {
	return writeFile(path, perm, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

func writeFile(path string, perm os.FileMode, fill func(*os.File) error) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close() // a second Close fails harmlessly
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := fill(tmp); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("%s: fsync: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("%s: fsync directory: %w", path, err)
	}
	return nil
}

// SyncDir fsyncs the directory dir, so that the names created, renamed or
// removed in it survive a crash. Where directories cannot be synced (the
// system answers os.ErrInvalid) it does nothing.
func SyncDir(dir string) error {
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("%s: fsync directory: %w", dir, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}

// ReplaceDir puts the directory tmp, whose files are complete and synced,
// at final (in the same parent directory, or at least on the same file
// system): it fsyncs tmp, renames it to final and fsyncs final's parent.
//
// With aside set, an existing final is replaced: it is first renamed to
// aside (after removing whatever aside held; rename cannot replace a
// non-empty directory), so that the old copy stays whole until the new
// one is in place, and it is renamed back if tmp cannot be. Once final's
// parent is synced, aside is removed (whether or not it came from final;
// a failure there is not reported, aside being a leftover). A crash midway
// therefore leaves the old copy at final or at aside, and the new one at
// tmp or at final. With aside empty, the rename fails if final is a
// non-empty directory, and final is left as it is.
func ReplaceDir(tmp, final, aside string) error {
	if err := SyncDir(tmp); err != nil {
		return err
	}
	moved := false
	if aside != "" {
		if _, err := os.Lstat(final); err == nil {
			if err := os.RemoveAll(aside); err != nil {
				return fmt.Errorf("moving the old %s aside: %w", final, err)
			}
			if err := os.Rename(final, aside); err != nil {
				return fmt.Errorf("moving the old %s aside: %w", final, err)
			}
			moved = true
		}
	}
	if err := os.Rename(tmp, final); err != nil {
		if moved {
			os.Rename(aside, final)
		}
		return err
	}
	if err := SyncDir(filepath.Dir(final)); err != nil {
		return err
	}
	if aside != "" {
		os.RemoveAll(aside)
	}
	return nil
}
