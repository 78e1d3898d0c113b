package history

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

func TestHugeRange(t *testing.T) {
	const mb = 1 << 20
	for _, c := range []struct{ addr, size, off, n uintptr }{
		{0, 4 * mb, 0, 0},
		{0, 8 * mb, 0, 8 * mb},
		{1, 8 * mb, 2*mb - 1, 6 * mb},
		{2 * mb, 9*mb + 5, 0, 8 * mb},
		{3 * mb, 10 * mb, mb, 8 * mb},
		{3*mb + 4096, 10 * mb, mb - 4096, 8 * mb},
	} {
		off, n := hugeRange(c.addr, c.size)
		if off != c.off || n != c.n {
			t.Errorf("hugeRange(%#x, %#x) = %#x, %#x; want %#x, %#x", c.addr, c.size, off, n, c.off, c.n)
		}
		if n > 0 && ((c.addr+off)%hugePage != 0 || off+n > c.size) {
			t.Errorf("hugeRange(%#x, %#x): [%#x, +%#x) not whole huge pages inside", c.addr, c.size, off, n)
		}
	}
}

// TestAdviseHugePages: the kernel records the advice on the array's memory
// (VmFlags "hg" in /proc/self/smaps), so a wrong range or a call that
// fails does not pass unnoticed.
func TestAdviseHugePages(t *testing.T) {
	s := make([]Op, 0, (32<<20)/unsafe.Sizeof(Op{}))
	adviseHugePages(s)
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	off, _ := hugeRange(addr, uintptr(cap(s))*unsafe.Sizeof(Op{}))
	at := addr + off
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	inside := false
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 {
			inside = lo <= at && at < hi
			continue
		}
		if inside && strings.HasPrefix(line, "VmFlags:") {
			if !strings.Contains(line, " hg") {
				t.Fatalf("no huge page advice at %#x: %s", at, line)
			}
			return
		}
	}
	t.Fatalf("no mapping holds %#x", at)
}
