//go:build !linux

package history

// adviseHugePages does nothing here: see the Linux version.
func adviseHugePages[T any](s []T) {}
