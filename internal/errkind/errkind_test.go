package errkind_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/mcnode/mcnode/internal/errkind"
)

func TestKindMatchesThroughWrapping(t *testing.T) {
	own := errkind.New("group: lease lost", errkind.LeaseLost)
	err := fmt.Errorf("%w: %w", own, errors.New("removed"))
	if !errors.Is(err, own) || !errors.Is(err, errkind.LeaseLost) {
		t.Fatalf("%v: does not match its sentinel or its kind", err)
	}
	if errors.Is(err, errkind.Closed) || errors.Is(errkind.LeaseLost, own) {
		t.Fatal("a kind matches what it is not")
	}
	if own.Error() != "group: lease lost" {
		t.Fatalf("message %q", own.Error())
	}
}
