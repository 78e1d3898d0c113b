package history

import (
	"io"
	"strconv"
	"unicode/utf8"
)

// Encoder writes records in the JSONL form of FORMAT.md: one JSON object per
// line, fields in a fixed order, zero optional fields omitted. Its output
// decodes to the same Op with Decoder and with encoding/json. It does not
// check the order of records (Recorder and New do that).
type Encoder struct {
	w   io.Writer
	buf []byte
}

// NewEncoder returns an Encoder writing to w. Each record is one Write call;
// wrap w in a bufio.Writer for throughput (and flush it).
func NewEncoder(w io.Writer) *Encoder { return &Encoder{w: w} }

// Encode writes op as one line.
func (e *Encoder) Encode(op *Op) error {
	e.buf = AppendRecord(e.buf[:0], op)
	_, err := e.w.Write(e.buf)
	return err
}

// AppendRecord appends op as one JSON line (with its '\n') to b. An invalid
// Type is written as the empty string, which no decoder accepts.
func AppendRecord(b []byte, op *Op) []byte {
	b = append(b, `{"i":`...)
	b = strconv.AppendInt(b, op.I, 10)
	b = append(b, `,"proc":`...)
	b = strconv.AppendInt(b, int64(op.Process), 10)
	b = append(b, `,"type":"`...)
	if op.Type.Valid() {
		b = append(b, typeNames[op.Type]...)
	}
	b = append(b, `","f":`...)
	b = appendString(b, op.F)
	b = optString(b, `,"key":`, op.Key)
	b = optString(b, `,"field":`, op.Field)
	b = optInt(b, `,"token":`, op.Token)
	b = optString(b, `,"owner":`, op.Owner)
	b = optInt(b, `,"ttl_ms":`, op.TTLMs)
	b = optString(b, `,"value":`, op.Value)
	b = optString(b, `,"err":`, op.Err)
	b = optInt(b, `,"n":`, op.N)
	b = optInt(b, `,"count":`, op.Count)
	b = optInt(b, `,"gen":`, op.Gen)
	b = optInt(b, `,"seq":`, op.Seq)
	b = optInt(b, `,"capacity":`, op.Capacity)
	b = optString(b, `,"algo":`, op.Algo)
	b = optInt(b, `,"limit":`, op.Limit)
	b = optInt(b, `,"window_ms":`, op.WindowMs)
	b = optInt(b, `,"segments":`, op.Segments)
	b = optInt(b, `,"burst":`, op.Burst)
	b = optInt(b, `,"rate":`, op.Rate)
	b = optInt(b, `,"period_ms":`, op.PeriodMs)
	b = optString(b, `,"explains":`, op.Explains)
	b = optInt(b, `,"drift_us":`, op.DriftUs)
	b = append(b, `,"t":`...)
	b = strconv.AppendInt(b, op.T, 10)
	return append(b, "}\n"...)
}

func optString(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, name...), s)
}

func optInt(b []byte, name string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, name...), n, 10)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does; U+2028 and U+2029 are escaped so that the output is also
// valid JavaScript.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += n
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += n
			start = i
			continue
		}
		i += n
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
