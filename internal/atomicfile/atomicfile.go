// Package atomicfile replaces small state files whole: a reader, or a host
// that loses power, finds the old content or the new, never a part. The
// runtime's records that decide whether a daemon may found a group must not
// be read empty.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data: it writes a temporary file beside it (in
// the same directory, so that the rename stays on one file system; mode
// 0600), syncs it, and renames it over path. On an error path is as it
// was, and the temporary file is gone. The temporary file's name is path's
// and "." and up to 10 digits.
func Write(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
