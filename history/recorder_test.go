package history

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestRecorderSingleInFlight(t *testing.T) {
	r := NewRecorder(time.Now())
	if _, err := r.Invoke(1, Op{F: "acquire", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if !r.InFlight(1) || r.InFlight(2) {
		t.Fatal("InFlight")
	}
	if _, err := r.Invoke(1, Op{F: "release", Key: "k"}); !errors.Is(err, ErrInFlight) {
		t.Fatalf("second invoke: %v", err)
	}
	if _, err := r.OK(2, Op{}); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("completion without invoke: %v", err)
	}
	if _, err := r.Complete(1, Invoke, Op{}); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("invoke as completion: %v", err)
	}
	if _, err := r.OK(1, Op{F: "release"}); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("f mismatch: %v", err)
	}
	if _, err := r.OK(1, Op{Key: "other"}); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("key mismatch: %v", err)
	}
	done, err := r.OK(1, Op{Token: 5, TTLMs: 100})
	if err != nil {
		t.Fatal(err)
	}
	if done.F != "acquire" || done.Key != "k" || done.Type != OK || done.I != 1 {
		t.Fatalf("completion %+v", done)
	}
	if _, err := r.Invoke(1, Op{}); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("invoke without f: %v", err)
	}
	if _, err := r.Invoke(-1, Op{F: "x"}); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("negative proc: %v", err)
	}
	if _, err := r.Fail(1, Op{}); !errors.Is(err, ErrNotInFlight) {
		t.Fatalf("double completion: %v", err)
	}
	if _, err := r.Invoke(1, Op{F: "release", Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Info(1, Op{Err: "timeout"}); err != nil {
		t.Fatal(err)
	}
}

// TestRecorderConcurrent records from many goroutines and checks that the
// result is a well-formed history that survives encoding and decoding.
func TestRecorderConcurrent(t *testing.T) {
	r := NewRecorder(time.Now())
	const procs, each = 16, 200
	var wg sync.WaitGroup
	for p := 0; p < procs; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for k := 0; k < each; k++ {
				if _, err := r.Invoke(p, Op{F: "acquire", Key: "k"}); err != nil {
					t.Error(err)
					return
				}
				var err error
				switch k % 3 {
				case 0:
					_, err = r.OK(p, Op{Token: int64(k + 1)})
				case 1:
					_, err = r.Fail(p, Op{})
				default:
					_, err = r.Info(p, Op{Err: "lost"})
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}(p)
	}
	wg.Wait()
	recs := r.Records()
	if len(recs) != 2*procs*each {
		t.Fatalf("%d records", len(recs))
	}
	if _, err := New(recs); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := r.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo: %d, %v", n, err)
	}
	h, err := Read(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Ops) != procs*each || len(r.History().Ops) != procs*each {
		t.Fatalf("%d ops", len(h.Ops))
	}
	for k := 1; k < len(recs); k++ {
		if recs[k].T < recs[k-1].T || recs[k].I != recs[k-1].I+1 {
			t.Fatalf("record %d out of order", k)
		}
	}
	if r.Now() < recs[len(recs)-1].T {
		t.Fatal("clock went backwards")
	}
}

func TestRecorderClockStartsAtStart(t *testing.T) {
	start := time.Now()
	r := NewRecorder(start.Add(-time.Second))
	op, err := r.Invoke(0, Op{F: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if op.T < int64(time.Second) || op.T > int64(time.Minute) {
		t.Fatalf("t = %d", op.T)
	}
}

func TestWriteToError(t *testing.T) {
	r := NewRecorder(time.Now())
	for p := 0; p < 3000; p++ {
		if _, err := r.Invoke(p, Op{F: "acquire", Key: "k", Owner: "0123456789abcdef"}); err != nil {
			t.Fatal(err)
		}
	}
	boom := errors.New("disk full")
	if _, err := r.WriteTo(failWriter{boom}); !errors.Is(err, boom) {
		t.Fatalf("got %v", err)
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }
