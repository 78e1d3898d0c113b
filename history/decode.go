package history

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"fmt"
	"io"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Field numbers of Op, for the scanner and for error columns.
const (
	fNone = iota
	fI
	fProc
	fType
	fF
	fKey
	fField
	fToken
	fOwner
	fTTL
	fValue
	fErr
	fN
	fCount
	fGen
	fSeq
	fCapacity
	fAlgo
	fLimit
	fWindow
	fSegments
	fBurst
	fRate
	fPeriod
	fExplains
	fDrift
	fT
	nFields
)

// fieldNames are the JSON names, indexed by field number.
var fieldNames = [nFields]string{
	fI: "i", fProc: "proc", fType: "type", fF: "f", fKey: "key", fField: "field",
	fToken: "token", fOwner: "owner", fTTL: "ttl_ms", fValue: "value", fErr: "err",
	fN: "n", fCount: "count", fGen: "gen", fSeq: "seq", fCapacity: "capacity",
	fAlgo: "algo", fLimit: "limit", fWindow: "window_ms", fSegments: "segments",
	fBurst: "burst", fRate: "rate", fPeriod: "period_ms", fExplains: "explains", fDrift: "drift_us", fT: "t",
}

// foldedFields maps case-folded names to field numbers: encoding/json matches
// object keys to struct fields case-insensitively, and so does the scanner.
var foldedFields = func() map[string]int {
	m := make(map[string]int, nFields)
	for f := fI; f < nFields; f++ {
		m[string(foldName([]byte(fieldNames[f])))] = f
	}
	return m
}()

func lookupField(key []byte) int {
	switch string(key) {
	case "i":
		return fI
	case "proc":
		return fProc
	case "type":
		return fType
	case "f":
		return fF
	case "key":
		return fKey
	case "field":
		return fField
	case "token":
		return fToken
	case "owner":
		return fOwner
	case "ttl_ms":
		return fTTL
	case "value":
		return fValue
	case "err":
		return fErr
	case "n":
		return fN
	case "count":
		return fCount
	case "gen":
		return fGen
	case "seq":
		return fSeq
	case "capacity":
		return fCapacity
	case "algo":
		return fAlgo
	case "limit":
		return fLimit
	case "window_ms":
		return fWindow
	case "segments":
		return fSegments
	case "burst":
		return fBurst
	case "rate":
		return fRate
	case "period_ms":
		return fPeriod
	case "explains":
		return fExplains
	case "drift_us":
		return fDrift
	case "t":
		return fT
	}
	if len(key) > 32 {
		return fNone
	}
	return foldedFields[string(foldName(key))]
}

// foldName folds a name the way encoding/json does (ASCII upper case, other
// runes to the smallest rune of their fold set).
func foldName(in []byte) []byte {
	out := make([]byte, 0, len(in))
	for i := 0; i < len(in); {
		if c := in[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		for {
			r2 := unicode.SimpleFold(r)
			if r2 <= r {
				r = r2
				break
			}
			r = r2
		}
		out = utf8.AppendRune(out, r)
		i += n
	}
	return out
}

// MaxLineBytes is the longest line a Decoder accepts.
const MaxLineBytes = 16 << 20

// maxDepth bounds the nesting of ignored values, as encoding/json does.
const maxDepth = 10000

// Decoder reads a history in the JSONL form of FORMAT.md and checks it as it
// goes: every record must be a JSON object on one line, with a valid type,
// increasing i, non-decreasing t, at most one operation in flight per
// process, and no completion without its invoke. Any violation is an *Error
// with the line and column; the Decoder never panics on any input.
//
// A gzip-compressed history (what coordtorture writes: *.jsonl.gz) is read
// the same way: the Decoder recognises gzip by its magic bytes, whatever the
// input is called. Errors of the compressed stream itself are not *Errors.
type Decoder struct {
	r        *bufio.Reader
	line     int
	long     []byte
	scratch  []byte
	strs     map[string]string
	v        validator
	pos      [nFields]int
	err      error
	header   *Header
	sniffed  bool  // the first bytes were looked at for gzip's magic
	sniffErr error // what starting to decompress met
	gzip     bool  // the input is gzip-compressed; r reads the text
	tolerate bool  // TolerateCut
	cut      *Cut
}

// NewDecoder returns a Decoder reading from r. It buffers its input.
func NewDecoder(r io.Reader) *Decoder {
	return &Decoder{r: bufio.NewReaderSize(r, 64<<10), strs: make(map[string]string)}
}

// TolerateCut makes the Decoder accept a history cut short by a crash of its
// writer: a last line without its '\n' that is not a complete record is
// ignored, and so is the end of a gzip stream that stops before its trailer
// (the lines it holds are read); Cut then says what was ignored. Anything
// malformed before the last line is an error as ever. Call it before the
// first Decode.
func (d *Decoder) TolerateCut() { d.tolerate = true }

// Cut says how the history ended early, once Decode has returned io.EOF
// (TolerateCut); nil when it ended as a complete history does.
func (d *Decoder) Cut() *Cut { return d.cut }

// Cut describes a history whose writer stopped in the middle of it (a crash,
// a full disk): what a tolerant read (TolerateCut, ReadTolerant) ignored.
type Cut struct {
	// Line is the line whose record was cut (ignored); 0 when every line
	// read was complete (only the gzip stream's end is missing).
	Line int `json:"line,omitempty"`
	// Bytes is the length of what is left of the cut line.
	Bytes int `json:"bytes,omitempty"`
	// Why is what the cut line lacks, as the record parser reports it.
	Why string `json:"why,omitempty"`
	// Gzip says the compressed stream stopped before its end.
	Gzip bool `json:"gzip,omitempty"`
	// Lines is the number of lines read before the cut (the header and
	// blank lines included).
	Lines int `json:"lines"`
}

// String says what was cut, for a person: "last record cut at line 1234
// (57 bytes left, no end of line): ignored".
func (c *Cut) String() string {
	var s string
	if c.Gzip {
		s = "gzip stream cut short"
		if c.Line == 0 {
			return fmt.Sprintf("%s after line %d (every line before the cut is complete)", s, c.Lines)
		}
		s += "; "
	}
	return s + fmt.Sprintf("last record cut at line %d (%d bytes left, no end of line): ignored", c.Line, c.Bytes)
}

// gzipMagic starts every gzip stream (RFC 1952); a JSONL history never
// starts with it.
var gzipMagic = []byte{0x1f, 0x8b}

// sniff switches d to the decompressed text when its input starts with
// gzip's magic bytes (once: later calls return the first one's error).
func (d *Decoder) sniff() error {
	if !d.sniffed {
		d.sniffed = true
		d.sniffErr = d.sniff1()
	}
	return d.sniffErr
}

func (d *Decoder) sniff1() error {
	b, err := d.r.Peek(len(gzipMagic))
	if err == io.EOF && len(b) == 1 && b[0] == gzipMagic[0] {
		d.gzip = true // the first byte of a stream cut right after it
		return io.ErrUnexpectedEOF
	}
	if !bytes.Equal(b, gzipMagic) {
		return nil // a read error comes back from the read itself
	}
	zr, err := gzip.NewReader(d.r)
	d.gzip = true
	if err != nil {
		return err
	}
	d.r = bufio.NewReaderSize(zr, 64<<10)
	return nil
}

// Line is the number of lines read so far.
func (d *Decoder) Line() int { return d.line }

// Header is the history's header (FORMAT.md), once the first line has been
// read; nil when the history has none.
func (d *Decoder) Header() *Header { return d.header }

// Decode reads the next record into op. It returns io.EOF after the last
// record, an *Error for a malformed record, or the reader's error. Errors are
// sticky. Blank lines are skipped, and so is a header on the first line
// (see Header).
func (d *Decoder) Decode(op *Op) error { return d.decode(op, true) }

// decode is Decode; clear false: op is already zero (a slot of a new slice,
// which ReadAll fills without writing it twice).
func (d *Decoder) decode(op *Op, clear bool) error {
	if d.err != nil {
		return d.err
	}
	if err := d.sniff(); err != nil {
		if d.tolerate && err == io.ErrUnexpectedEOF {
			d.cut, d.err = &Cut{Gzip: true}, io.EOF // cut inside gzip's own header
			return d.err
		}
		return d.readErr(err)
	}
	for {
		line, err := d.readLine()
		if e, ok := err.(*Error); ok {
			d.line++
			d.err = e
			return e
		}
		if err != nil && err != io.EOF {
			if !d.gzip || err != io.ErrUnexpectedEOF || !d.tolerate {
				return d.readErr(err)
			}
			// The compressed stream stopped early: line is what it held of
			// its last line.
			d.cut = &Cut{Gzip: true}
			err = io.EOF
		}
		if err == io.EOF && len(line) == 0 {
			if d.cut != nil {
				d.cut.Lines = d.line
			}
			d.err = io.EOF
			return d.err
		}
		last := err == io.EOF // no '\n' after this line: nothing follows
		d.line++
		if isBlank(line) {
			continue
		}
		if d.line == 1 && isHeaderLine(line) {
			if d.header, err = parseHeader(line); err != nil {
				d.err = &Error{Line: 1, Column: 1, Msg: err.Error()}
				return d.err
			}
			continue
		}
		if clear {
			*op = Op{}
		}
		d.pos = [nFields]int{}
		if e := d.parse(line, op); e != nil {
			if last && d.tolerate && e.eol {
				// A writer that stopped in the middle of a record: every
				// record ends with "}\n", so what is left never parses.
				if d.cut == nil {
					d.cut = &Cut{}
				}
				d.cut.Line, d.cut.Bytes, d.cut.Lines = d.line, len(line), d.line-1
				d.cut.Why = fmt.Sprintf("column %d: %s", e.col+1, e.msg)
				d.err = io.EOF
				return d.err
			}
			d.err = &Error{Line: d.line, Column: e.col + 1, Msg: e.msg}
			return d.err
		}
		if e := d.v.check(op, d.line); e != nil {
			d.err = &Error{Line: d.line, Column: d.pos[e.field] + 1, Msg: e.msg}
			return d.err
		}
		if last {
			if d.cut != nil {
				d.cut.Lines = d.line
			}
			d.err = io.EOF // the next Decode
		}
		return nil
	}
}

// readErr makes err, from reading the input, the Decoder's sticky error.
func (d *Decoder) readErr(err error) error {
	if d.gzip && err == io.ErrUnexpectedEOF {
		err = fmt.Errorf("history: reading line %d: the gzip stream is cut short (%w)", d.line+1, err)
	} else if d.gzip {
		err = fmt.Errorf("history: reading line %d: gzip: %w", d.line+1, err)
	} else {
		err = fmt.Errorf("history: reading line %d: %w", d.line+1, err)
	}
	d.err = err
	return err
}

// readLine returns the next line without its '\n'. A line longer than
// MaxLineBytes is an *Error (returned with a non-empty line).
func (d *Decoder) readLine() ([]byte, error) {
	b, err := d.r.ReadSlice('\n')
	if err == nil {
		return b[:len(b)-1], nil
	}
	if err != bufio.ErrBufferFull {
		return b, err // the last line (io.EOF) or a read error
	}
	d.long = append(d.long[:0], b...)
	for {
		b, err = d.r.ReadSlice('\n')
		d.long = append(d.long, b...)
		if len(d.long) > MaxLineBytes+1 {
			return d.long[:1], &Error{Line: d.line + 1, Column: MaxLineBytes + 1, Msg: fmt.Sprintf("line longer than %d bytes", MaxLineBytes)}
		}
		switch err {
		case nil:
			return d.long[:len(d.long)-1], nil
		case bufio.ErrBufferFull:
			continue
		default:
			return d.long, err
		}
	}
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			return false
		}
	}
	return true
}

// ReadAll decodes every record of r (skipping a header). On error it
// returns the records before the bad one.
func ReadAll(r io.Reader) ([]Op, error) {
	return readAll(r, NewDecoder(r))
}

// readAll is ReadAll through d, a new decoder of r that has read nothing yet
// (the caller keeps d to read the header).
func readAll(r io.Reader, d *Decoder) ([]Op, error) {
	lines, textSize, err := countLines(r)
	if err != nil {
		return nil, err
	}
	if lines == 0 {
		lines = d.inflate(textSize)
	}
	if lines > 0 {
		// One slice of the right size: no chunks to copy, no fresh memory
		// touched twice (page faults cost more than decoding here).
		ops := make([]Op, 0, lines)
		adviseHugePages(ops)
		for {
			if len(ops) == cap(ops) {
				break // the input grew: go on in chunks
			}
			ops = ops[:len(ops)+1]
			if err := d.decode(&ops[len(ops)-1], false); err != nil {
				ops = ops[:len(ops)-1]
				if err == io.EOF {
					err = nil
				}
				return ops, err
			}
		}
		rest, err := readChunks(d)
		return append(ops, rest...), err
	}
	return readChunks(d)
}

// inflate reads the whole text of a gzip-compressed input into memory and
// returns its number of lines (0 for an input that is not compressed, or
// whose compression could not start: decode reports why). The text takes
// less memory than the records it holds, and sizing their slice from the
// count (readAll) costs less than growing it in chunks. size is the text's
// size if known (0 if not). What the decompression met at the end (a stream
// cut short, a bad checksum) comes after the text, where decode meets it as
// it would have when streaming.
func (d *Decoder) inflate(size int) int {
	if d.sniff() != nil || !d.gzip {
		return 0
	}
	text, err := readText(d.r, size)
	d.r = bufio.NewReaderSize(&textReader{text, err}, 64<<10)
	return bytes.Count(text, []byte{'\n'}) + 1
}

// readText is io.ReadAll for large inputs, with the size expected: one
// array when the size is right, and fresh arrays written once (huge pages:
// see adviseHugePages) rather than zeroed then written as io.ReadAll's.
func readText(r io.Reader, size int) ([]byte, error) {
	b := make([]byte, 0, max(size+1, 64<<10))
	adviseHugePages(b)
	for {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), 2*cap(b))
			adviseHugePages(nb)
			copy(nb, b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// textReader reads b, then returns err (io.EOF when nil).
type textReader struct {
	b   []byte
	err error
}

func (t *textReader) Read(p []byte) (int, error) {
	if len(t.b) == 0 {
		if t.err == nil {
			return 0, io.EOF
		}
		return 0, t.err
	}
	n := copy(p, t.b)
	t.b = t.b[n:]
	return n, nil
}

// countLines returns the number of lines left in r, or 0 when r cannot be
// read twice (it is not a Seeker: a pipe, a network stream) or is
// compressed, having counted them and gone back to where r was. For a
// compressed r, textSize is the size of the text it holds, as gzip's
// trailer states it (0 if it seems wrong).
func countLines(r io.Reader) (lines, textSize int, err error) {
	s, ok := r.(io.ReadSeeker)
	if !ok {
		return 0, 0, nil
	}
	start, err := s.Seek(0, io.SeekCurrent)
	if err != nil {
		return 0, 0, nil // e.g. a pipe as an *os.File
	}
	buf := make([]byte, 256<<10)
	lines = 1 // a last line without '\n'
	var rerr error
	for first := true; ; first = false {
		n, err := s.Read(buf)
		if first && bytes.HasPrefix(buf[:n], gzipMagic) {
			lines = 0 // compressed: the lines are not countable here
			textSize = gzipTextSize(s, start)
			break
		}
		lines += bytes.Count(buf[:n], []byte{'\n'})
		if err != nil {
			if err != io.EOF {
				rerr = err
			}
			break
		}
	}
	if _, err := s.Seek(start, io.SeekStart); err != nil {
		return 0, 0, fmt.Errorf("history: going back after counting lines: %w", err)
	}
	if rerr != nil {
		return 0, 0, nil // let the decoder meet the error where it is
	}
	return lines, textSize, nil
}

// gzipTextSize is the size of the text of the gzip stream s holds from
// start: the ISIZE of its trailer (RFC 1952: the size modulo 2^32, of the
// last member), 0 when that cannot be read or is implausible (a stream cut
// short ends with anything) for text of that compressed size.
func gzipTextSize(s io.ReadSeeker, start int64) int {
	end, err := s.Seek(-4, io.SeekEnd)
	if err != nil {
		return 0
	}
	var t [4]byte
	if _, err := io.ReadFull(s, t[:]); err != nil {
		return 0
	}
	size, packed := int64(binary.LittleEndian.Uint32(t[:])), end+4-start
	if size < packed || size > 64*packed {
		return 0
	}
	return int(size)
}

// readChunks decodes the rest of d's input.
func readChunks(d *Decoder) ([]Op, error) {
	// Fill fixed-size chunks and copy once at the end: growing one slice of
	// large structs by doubling costs more than decoding them.
	var chunks [][]Op
	cur := make([]Op, 0, 1024)
	total := 0
	var err error
	for {
		if len(cur) == cap(cur) {
			chunks = append(chunks, cur)
			cur = make([]Op, 0, min(2*cap(cur), 64<<10))
		}
		cur = cur[:len(cur)+1]
		if err = d.decode(&cur[len(cur)-1], false); err != nil {
			cur = cur[:len(cur)-1]
			break
		}
		total++
	}
	if err == io.EOF {
		err = nil
	}
	if len(chunks) == 0 {
		return cur, err
	}
	ops := make([]Op, 0, total)
	adviseHugePages(ops)
	for _, c := range chunks {
		ops = append(ops, c...)
	}
	return append(ops, cur...), err
}

// Read decodes a whole history, plain or gzip-compressed, and pairs its
// operations. A header, if any, is the History's Header.
func Read(r io.Reader) (*History, error) {
	return read(r, false)
}

// ReadTolerant is Read for a history whose writer may have stopped in the
// middle of it (a crash): a last record cut short, or a gzip stream without
// its end, is ignored and described by the History's Cut (see
// Decoder.TolerateCut). Anything malformed before the last line is an error,
// as with Read.
func ReadTolerant(r io.Reader) (*History, error) {
	return read(r, true)
}

func read(r io.Reader, tolerate bool) (*History, error) {
	d := NewDecoder(r)
	d.tolerate = tolerate
	ops, err := readAll(r, d)
	if err != nil {
		return nil, err
	}
	h := build(ops, true)
	h.Header = d.Header()
	h.Cut = d.Cut()
	return h, nil
}

// ParseRecord parses one line into op without the history-level checks (the
// order of i and t, processes in flight), and checks only that the line is
// one JSON object whose known fields have the right JSON types. It agrees
// with encoding/json.Unmarshal into an Op on every input that function
// accepts. The returned error is an *Error with Line 1.
func ParseRecord(line []byte, op *Op) error {
	d := Decoder{strs: make(map[string]string)}
	*op = Op{}
	if e := d.parse(line, op); e != nil {
		return &Error{Line: 1, Column: e.col + 1, Msg: e.msg}
	}
	return nil
}

type scanErr struct {
	col int // 0-based
	msg string
	// eol: the line ended where the record needed more (a proper prefix of
	// a record: what a writer that stopped in the middle of one leaves).
	eol bool
}

func errAt(b []byte, i int, what string) *scanErr {
	if i >= len(b) {
		return &scanErr{i, "unexpected end of line, " + what, true}
	}
	return &scanErr{col: i, msg: fmt.Sprintf("invalid character %s, %s", quoteChar(b[i]), what)}
}

func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	if c >= 0x20 && c < 0x7f {
		return "'" + string(c) + "'"
	}
	return fmt.Sprintf("0x%02x", c)
}

func skipWS(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\r', '\n':
			i++
		default:
			return i
		}
	}
	return i
}

// parse scans one JSON object into op.
func (d *Decoder) parse(b []byte, op *Op) *scanErr {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errAt(b, i, "expected '{' starting a record")
	}
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			if i >= len(b) || b[i] != '"' {
				return errAt(b, i, "expected a quoted field name")
			}
			key, next, e := d.scanString(b, i)
			if e != nil {
				return e
			}
			f := lookupField(key)
			i = skipWS(b, next)
			if i >= len(b) || b[i] != ':' {
				return errAt(b, i, "expected ':' after a field name")
			}
			i = skipWS(b, i+1)
			if f != fNone {
				d.pos[f] = i
			}
			i, e = d.value(b, i, f, op)
			if e != nil {
				return e
			}
			i = skipWS(b, i)
			if i < len(b) && b[i] == ',' {
				i = skipWS(b, i+1)
				continue
			}
			if i < len(b) && b[i] == '}' {
				i++
				break
			}
			return errAt(b, i, "expected ',' or '}' after a field")
		}
	}
	i = skipWS(b, i)
	if i < len(b) {
		return errAt(b, i, "after the end of the record (one record per line)")
	}
	return nil
}

// value scans the value of field f into op.
func (d *Decoder) value(b []byte, i, f int, op *Op) (int, *scanErr) {
	switch f {
	case fNone:
		return skipValue(b, i, 0)
	case fType:
		if isNull(b, i) {
			return i + 4, nil
		}
		if i >= len(b) || b[i] != '"' {
			return i, d.typeErr(b, i, f, "a string")
		}
		s, next, e := d.scanString(b, i)
		if e != nil {
			return i, e
		}
		t, ok := parseType(s)
		if !ok {
			return i, &scanErr{col: i, msg: fmt.Sprintf("unknown record type %q (want invoke, ok, fail or info)", s)}
		}
		op.Type = t
		return next, nil
	case fF, fKey, fField, fOwner, fValue, fErr, fAlgo, fExplains:
		if isNull(b, i) {
			return i + 4, nil
		}
		if i >= len(b) || b[i] != '"' {
			return i, d.typeErr(b, i, f, "a string")
		}
		s, next, e := d.scanString(b, i)
		if e != nil {
			return i, e
		}
		var str string
		switch f {
		case fOwner, fValue:
			str = string(s)
		default:
			str = d.intern(s)
		}
		switch f {
		case fF:
			op.F = str
		case fKey:
			op.Key = str
		case fField:
			op.Field = str
		case fOwner:
			op.Owner = str
		case fValue:
			op.Value = str
		case fErr:
			op.Err = str
		case fAlgo:
			op.Algo = str
		case fExplains:
			op.Explains = str
		}
		return next, nil
	}
	// integer fields
	if isNull(b, i) {
		return i + 4, nil
	}
	n, next, e := scanInt(b, i)
	if e != nil {
		if e.msg == "" {
			return i, d.typeErr(b, i, f, "an integer")
		}
		return i, e
	}
	switch f {
	case fI:
		op.I = n
	case fProc:
		op.Process = int(n)
		if int64(op.Process) != n {
			return i, &scanErr{col: i, msg: "proc out of range"}
		}
	case fToken:
		op.Token = n
	case fTTL:
		op.TTLMs = n
	case fN:
		op.N = n
	case fCount:
		op.Count = n
	case fGen:
		op.Gen = n
	case fSeq:
		op.Seq = n
	case fCapacity:
		op.Capacity = n
	case fLimit:
		op.Limit = n
	case fWindow:
		op.WindowMs = n
	case fSegments:
		op.Segments = n
	case fBurst:
		op.Burst = n
	case fRate:
		op.Rate = n
	case fPeriod:
		op.PeriodMs = n
	case fDrift:
		op.DriftUs = n
	case fT:
		op.T = n
	}
	return next, nil
}

// typeErr reports a value of the wrong JSON type; when the value is not even
// valid JSON, that is reported instead.
func (d *Decoder) typeErr(b []byte, i, f int, want string) *scanErr {
	if _, e := skipValue(b, i, 0); e != nil {
		return e
	}
	return &scanErr{col: i, msg: fmt.Sprintf("field %q must be %s or null", fieldNames[f], want)}
}

func isNull(b []byte, i int) bool {
	return len(b)-i >= 4 && b[i] == 'n' && b[i+1] == 'u' && b[i+2] == 'l' && b[i+3] == 'l'
}

func (d *Decoder) intern(s []byte) string {
	if v, ok := d.strs[string(s)]; ok {
		return v
	}
	v := string(s)
	if len(d.strs) < 4096 && len(v) <= 256 {
		d.strs[v] = v
	}
	return v
}

// scanInt scans a JSON number that must be an integer fitting in an int64.
// A value that is not a number at all gives a scanErr with an empty msg.
func scanInt(b []byte, i int) (int64, int, *scanErr) {
	start := i
	neg := false
	if i < len(b) && b[i] == '-' {
		neg = true
		i++
	}
	if i >= len(b) || b[i] < '0' || b[i] > '9' {
		if neg {
			return 0, i, errAt(b, i, "expected a digit in a number")
		}
		return 0, i, &scanErr{col: start, msg: ""}
	}
	var u uint64
	overflow := false
	if b[i] == '0' {
		i++
	} else {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			c := uint64(b[i] - '0')
			if u > (1<<63)/10 || (u == (1<<63)/10 && c > (1<<63)%10) {
				overflow = true
			} else {
				u = u*10 + c
			}
			i++
		}
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		end, e := skipNumber(b, start)
		if e != nil {
			return 0, end, e
		}
		return 0, start, &scanErr{col: start, msg: fmt.Sprintf("number %s is not an integer", b[start:end])}
	}
	if !neg && u > 1<<63-1 {
		overflow = true
	}
	if overflow {
		return 0, start, &scanErr{col: start, msg: fmt.Sprintf("number %s does not fit in 64 bits", b[start:i])}
	}
	if neg {
		return -int64(u), i, nil
	}
	return int64(u), i, nil
}

// skipNumber validates a JSON number starting at i.
func skipNumber(b []byte, i int) (int, *scanErr) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	if i >= len(b) || b[i] < '0' || b[i] > '9' {
		return i, errAt(b, i, "expected a digit in a number")
	}
	if b[i] == '0' {
		i++
	} else {
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, errAt(b, i, "expected a digit after the decimal point")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			return i, errAt(b, i, "expected a digit in an exponent")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	return i, nil
}

// skipValue validates and skips any JSON value.
func skipValue(b []byte, i, depth int) (int, *scanErr) {
	if i >= len(b) {
		return i, errAt(b, i, "expected a value")
	}
	switch c := b[i]; {
	case c == '"':
		return skipString(b, i)
	case c == '-' || (c >= '0' && c <= '9'):
		return skipNumber(b, i)
	case c == 't':
		return skipLiteral(b, i, "true")
	case c == 'f':
		return skipLiteral(b, i, "false")
	case c == 'n':
		return skipLiteral(b, i, "null")
	case c == '{' || c == '[':
		if depth >= maxDepth {
			return i, &scanErr{col: i, msg: "value nested too deeply"}
		}
		return skipComposite(b, i, depth+1)
	}
	return i, errAt(b, i, "expected a value")
}

func skipLiteral(b []byte, i int, lit string) (int, *scanErr) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(b) || b[i+k] != lit[k] {
			return i + k, errAt(b, i+k, "in literal "+lit)
		}
	}
	return i + len(lit), nil
}

func skipComposite(b []byte, i, depth int) (int, *scanErr) {
	open := b[i]
	i = skipWS(b, i+1)
	closeC := byte('}')
	if open == '[' {
		closeC = ']'
	}
	if i < len(b) && b[i] == closeC {
		return i + 1, nil
	}
	for {
		var e *scanErr
		if open == '{' {
			if i >= len(b) || b[i] != '"' {
				return i, errAt(b, i, "expected a quoted field name")
			}
			if i, e = skipString(b, i); e != nil {
				return i, e
			}
			i = skipWS(b, i)
			if i >= len(b) || b[i] != ':' {
				return i, errAt(b, i, "expected ':' after a field name")
			}
			i = skipWS(b, i+1)
		}
		if i, e = skipValue(b, i, depth); e != nil {
			return i, e
		}
		i = skipWS(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		if i < len(b) && b[i] == closeC {
			return i + 1, nil
		}
		return i, errAt(b, i, fmt.Sprintf("expected ',' or '%c'", closeC))
	}
}

func skipString(b []byte, i int) (int, *scanErr) {
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return j + 1, nil
		case c < 0x20:
			return j, errAt(b, j, "in a string (control characters must be escaped)")
		case c == '\\':
			j++
			if j >= len(b) {
				return j, errAt(b, j, "in a string escape")
			}
			switch b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if _, ok := hex4(b, j+1); !ok {
					return j, &scanErr{j - 1, "invalid \\u escape in a string", hexPrefix(b, j+1)}
				}
				j += 4
			default:
				return j, errAt(b, j, "in a string escape")
			}
		}
	}
	return len(b), errAt(b, len(b), "in a string (missing closing quote)")
}

// hexPrefix reports whether b[i:] is shorter than 4 bytes and all hex
// digits: a \u escape the end of the line cut.
func hexPrefix(b []byte, i int) bool {
	if len(b)-i >= 4 {
		return false
	}
	for _, c := range b[i:] {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func hex4(b []byte, i int) (rune, bool) {
	if len(b)-i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r*16 + rune(c)
	}
	return r, true
}

// scanString scans the JSON string at b[i] == '"' and returns its decoded
// bytes (valid until the next call) and the index after the closing quote.
// Invalid UTF-8 and unpaired surrogates become U+FFFD, as in encoding/json.
func (d *Decoder) scanString(b []byte, i int) ([]byte, int, *scanErr) {
	for j := i + 1; j < len(b); j++ {
		c := b[j]
		if c == '"' {
			return b[i+1 : j], j + 1, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return d.unquote(b, i, j)
		}
	}
	return nil, len(b), errAt(b, len(b), "in a string (missing closing quote)")
}

// unquote is the slow path of scanString from the first special byte at j.
func (d *Decoder) unquote(b []byte, i, j int) ([]byte, int, *scanErr) {
	out := append(d.scratch[:0], b[i+1:j]...)
	defer func() { d.scratch = out[:0] }()
	for j < len(b) {
		c := b[j]
		switch {
		case c == '"':
			return out, j + 1, nil
		case c < 0x20:
			return nil, j, errAt(b, j, "in a string (control characters must be escaped)")
		case c >= utf8.RuneSelf:
			r, n := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && n == 1 {
				out = utf8.AppendRune(out, unicode.ReplacementChar)
			} else {
				out = append(out, b[j:j+n]...)
			}
			j += n
		case c == '\\':
			if j+1 >= len(b) {
				return nil, j + 1, errAt(b, j+1, "in a string escape")
			}
			switch e := b[j+1]; e {
			case '"', '\\', '/':
				out = append(out, e)
				j += 2
			case 'b':
				out = append(out, '\b')
				j += 2
			case 'f':
				out = append(out, '\f')
				j += 2
			case 'n':
				out = append(out, '\n')
				j += 2
			case 'r':
				out = append(out, '\r')
				j += 2
			case 't':
				out = append(out, '\t')
				j += 2
			case 'u':
				r, ok := hex4(b, j+2)
				if !ok {
					return nil, j, &scanErr{j, "invalid \\u escape in a string", hexPrefix(b, j+2)}
				}
				j += 6
				if utf16.IsSurrogate(r) {
					if len(b)-j >= 6 && b[j] == '\\' && b[j+1] == 'u' {
						if r2, ok := hex4(b, j+2); ok {
							if dec := utf16.DecodeRune(r, r2); dec != unicode.ReplacementChar {
								out = utf8.AppendRune(out, dec)
								j += 6
								break
							}
						}
					}
					r = unicode.ReplacementChar
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, j + 1, errAt(b, j+1, "in a string escape")
			}
		default:
			out = append(out, c)
			j++
		}
	}
	return nil, len(b), errAt(b, len(b), "in a string (missing closing quote)")
}
