package fence_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mcnode/mcnode/group/fence"
)

// A holder with token 57 writes; one still holding token 41 from before is
// refused.
func ExampleCheck() {
	dir, err := os.MkdirTemp("", "fence")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "fence")

	fmt.Println(fence.Check(path, 57))
	err = fence.Check(path, 41)
	fmt.Println(errors.Is(err, fence.ErrStale))
	highest, _ := fence.Highest(path)
	fmt.Println(highest)
	// Output:
	// <nil>
	// true
	// 57
}
