package cuda

import "github.com/ebitengine/purego"

func dlopen(path string) (uintptr, error) {
	return purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}

func dlsym(lib uintptr, name string) (uintptr, error) { return purego.Dlsym(lib, name) }
