package history

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on Linux (x86-64, arm64
// with 4 KiB base pages).
const hugePage = 2 << 20

// adviseHugePages asks the kernel to back the whole 2 MiB pages of a large
// slice's array with huge pages (madvise MADV_HUGEPAGE: a hint that changes
// no contents), before they are first written. Decoding a large history
// writes a few hundred MB of fresh memory once; with 4 KiB pages the page
// faults cost more than the decoding where transparent huge pages are on
// request only ("madvise", as on many distributions). Arrays under 8 MiB are
// left alone. Only the decoder (Read, ReadAll) uses it: a command reading a
// file, not a long-running process whose freed memory the kernel could
// later fill back in huge pages.
func adviseHugePages[T any](s []T) {
	var zero T
	p := unsafe.Pointer(unsafe.SliceData(s))
	off, n := hugeRange(uintptr(p), uintptr(cap(s))*unsafe.Sizeof(zero))
	if n > 0 {
		_ = syscall.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, off)), n), syscall.MADV_HUGEPAGE)
	}
}

// hugeRange is the part of [addr, addr+size) made of whole huge pages, as an
// offset from addr and a length; n is 0 for arrays under 8 MiB.
func hugeRange(addr, size uintptr) (off, n uintptr) {
	if size < 8<<20 {
		return 0, 0
	}
	off = (hugePage - addr%hugePage) % hugePage
	return off, (size - off) &^ (hugePage - 1)
}
