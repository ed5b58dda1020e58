//go:build !amd64 || purego

package kernels

// registerArch adds nothing: off amd64, or built with the purego tag, only
// the pure-Go set exists.
func registerArch() {}
