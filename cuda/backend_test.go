package cuda

import (
	"sync"
	"testing"
)

var (
	backendOnce sync.Once
	backend     *Backend
	backendErr  error
)

// testBackend returns a backend on device 0 of the fake driver, opened
// once for the test binary.
func testBackend(t testing.TB) *Backend {
	t.Helper()
	useFake(t)
	backendOnce.Do(func() { backend, backendErr = Open(0) })
	if backendErr != nil {
		t.Fatal(backendErr)
	}
	return backend
}
