//go:build !linux

package cuda

import "errors"

var errNotLinux = errors.New("the CUDA backend runs on Linux only")

func dlopen(path string) (uintptr, error)             { return 0, errNotLinux }
func dlsym(lib uintptr, name string) (uintptr, error) { return 0, errNotLinux }
