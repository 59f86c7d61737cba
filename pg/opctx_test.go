package pg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestOpCtx(t *testing.T) {
	// The deadline: Err without a timer, then Done when asked.
	parent, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	c := newOpCtx(parent, 30*time.Millisecond)
	dl, ok := c.Deadline()
	require.True(t, ok)
	require.WithinDuration(t, time.Now().Add(30*time.Millisecond), dl, 20*time.Millisecond)
	require.NoError(t, c.Err())
	require.Nil(t, c.timed.Load(), "no timer before anything waits on Done")
	time.Sleep(40 * time.Millisecond)
	require.ErrorIs(t, c.Err(), context.DeadlineExceeded)
	select {
	case <-c.Done():
	case <-time.After(time.Second):
		t.Fatal("Done did not close after the deadline")
	}
	c.release()

	// The parent's failure, with its cause; AfterFunc fires on it.
	c = newOpCtx(parent, time.Hour)
	fired := make(chan struct{})
	stop := context.AfterFunc(c, func() { close(fired) })
	defer stop()
	why := errors.New("rank 3 died")
	cancel(why)
	select {
	case <-fired:
	case <-time.After(time.Second):
		t.Fatal("AfterFunc did not fire when the parent was cancelled")
	}
	require.ErrorIs(t, c.Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(c), why)
	c.release()

	// Released before anyone waited: a later Done is closed at once.
	c = newOpCtx(context.Background(), time.Hour)
	c.release()
	select {
	case <-c.Done():
	case <-time.After(time.Second):
		t.Fatal("Done of a released context stayed open")
	}
}
