package history

import (
	"bufio"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// WriteFile writes a history to the file at path (created or truncated): hdr,
// when not nil, on the first line, then records, in the JSONL form of
// FORMAT.md. A path ending in ".gz" gets it gzip-compressed (coordtorture
// writes histories/*.jsonl.gz: a fifth of the size, or less). Read, the
// Decoder and fencecheck read either form, recognising gzip by its magic
// bytes, and gunzip or zcat turn a compressed one back into text.
func WriteFile(path string, hdr *Header, records []Op) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	var w io.Writer = f
	var zw *gzip.Writer
	if strings.HasSuffix(path, ".gz") {
		zw = gzip.NewWriter(f)
		zw.Name = strings.TrimSuffix(filepath.Base(path), ".gz")
		w = zw
	}
	if err := writeRecords(w, hdr, records); err != nil {
		return err
	}
	if zw != nil {
		return zw.Close()
	}
	return nil
}

// writeRecords writes hdr (if any) and records to w through one buffer.
func writeRecords(w io.Writer, hdr *Header, records []Op) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	var buf []byte
	if hdr != nil {
		var err error
		if buf, err = AppendHeader(buf, hdr); err != nil {
			return err
		}
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	for k := range records {
		buf = AppendRecord(buf[:0], &records[k])
		if _, err := bw.Write(buf); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// NewTextReader returns a reader of the JSONL text of the history r holds:
// r's own bytes when they are plain text, their decompression when they
// start with gzip's magic bytes (whatever the file is called). For a tool
// that works on the lines themselves; Read and the Decoder do this already.
func NewTextReader(r io.Reader) (io.Reader, error) {
	br := bufio.NewReader(r)
	b, err := br.Peek(len(gzipMagic))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	if string(b) != string(gzipMagic) {
		return br, nil
	}
	return gzip.NewReader(br)
}
