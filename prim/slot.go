package prim

import "strings"

// Slot returns the Redis Cluster hash slot of a key (CRC16/XMODEM of the key,
// or of its hash tag: the bytes between the first '{' and the next '}', when
// that is non-empty), in 0..16383.
func Slot(key string) int { return int(crc16(hashed(key)) & 16383) }

// hashed is the part of key its slot is computed from: the hash tag, or the
// whole key.
func hashed(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}
