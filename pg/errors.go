package pg

import "errors"

// Sentinel errors; every error of this package wraps one, and capi maps
// them to status codes.
var (
	ErrInvalidArgument = errors.New("invalid argument")
	ErrTimeout         = errors.New("timed out")
	ErrAborted         = errors.New("communicator aborted")
	ErrRemote          = errors.New("peer failure")
	ErrNotSupported    = errors.New("not supported")
	ErrSystem          = errors.New("system error")
)
