package prim

import (
	"errors"
	"fmt"
)

// ErrNotAcquired reports contention: another owner holds the lease. Immediate
// (Try…) acquisitions return it without waiting.
var ErrNotAcquired = errors.New("prim: not acquired: held by another owner")

// ErrInvalidArgument is the class of every input error. Such errors are returned
// before any command is sent, so nothing on the server changes.
var ErrInvalidArgument = errors.New("prim: invalid argument")

// The input errors; each matches ErrInvalidArgument with errors.Is as well.
var (
	ErrEmptyKey = argError("empty key")
	// ErrEmptyField: a named lease (TryAcquireLease, AcquireLease) needs a
	// non-empty field of its hash.
	ErrEmptyField = argError("empty field")
	ErrSameKey    = argError("lease key and counter key are the same key")
	ErrCrossSlot  = argError("keys hash to different Redis Cluster slots")
	ErrInvalidTTL = argError("lease duration must be a whole number of milliseconds, at least 1ms")
)

type argErr struct{ msg string }

func argError(msg string) error               { return &argErr{msg: msg} }
func (e *argErr) Error() string               { return "prim: invalid argument: " + e.msg }
func (e *argErr) Is(target error) bool        { return target == ErrInvalidArgument }
func invalid(base error, detail string) error { return fmt.Errorf("%w: %s", base, detail) }

// ErrCounterInvalid is the class of fencing-counter errors: the counter exists
// but cannot be used. Acquisition then writes nothing (no lease, no increment).
var ErrCounterInvalid = errors.New("prim: fencing counter unusable")

// The counter errors; each matches ErrCounterInvalid with errors.Is as well.
var (
	ErrCounterExpiring  = counterError("the counter key has an expiry; a fencing counter must persist")
	ErrCounterNegative  = counterError("the counter is negative")
	ErrCounterMalformed = counterError("the counter is not a decimal integer")
	ErrCounterOverflow  = counterError("the counter is at the int64 maximum; incrementing would overflow")
)

type counterErr struct{ msg string }

func counterError(msg string) error        { return &counterErr{msg: msg} }
func (e *counterErr) Error() string        { return "prim: fencing counter unusable: " + e.msg }
func (e *counterErr) Is(target error) bool { return target == ErrCounterInvalid }

// ErrUncertain reports an operation whose outcome is unknown: it was sent, and a
// timeout, cancellation or disconnect hid the reply. It may have executed, or
// may still execute. An acquisition that ends this way is never reported as
// acquired; a handle whose renewal or release ends this way fails closed.
var ErrUncertain = errors.New("prim: outcome uncertain")

// ErrReleasePending is returned by Release when its context ended while another
// operation of the same handle was in flight: the release stays queued and runs
// as soon as that operation finishes.
var ErrReleasePending = errors.New("prim: release queued behind an in-flight operation")

// ErrUnsupportedClient is returned when an operation needs a dedicated connection
// (CLIENT ID / CLIENT KILL fencing) and the client type offers none.
var ErrUnsupportedClient = errors.New("prim: client type does not support dedicated connections")

// ErrClosed is returned by waiting acquisitions (AcquireFencedLock,
// AcquireLease) once the Coordinator is closed: a wait in progress ends with it
// promptly, and a new one fails with it before sending anything. Immediate
// acquisitions and held handles keep working after Close.
var ErrClosed = errors.New("prim: coordinator closed")
