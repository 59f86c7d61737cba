package pg

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gotree/gotree/algorithms"
	"github.com/gotree/gotree/backend"
)

// This file sets up the staging regions of shared allreduce plans
// (algorithms/shared.go): every rank of a one-host communicator creates
// one before the bootstrap and announces its name in the table; after the
// links are up each rank maps every peer's, the ranks tell each other
// over their links whether that worked, and each creator removes its file
// (the mappings stay). Shared plans run only where every rank mapped
// every region.

// stageBytes is the size of a rank's staging region: two halves of
// algorithms.SharedStageBytes.
const stageBytes = backend.StageHeaderBytes + 2*algorithms.SharedStageBytes

// stageTag marks the init-time messages that say whether a rank mapped
// every staging region.
const stageTag = 0x53544731 // "STG1"

// stages are this rank's mappings of the host's staging regions, by rank.
type stages struct {
	mu     sync.Mutex
	region []*backend.StageRegion // nil: none (shared plans do not run)
	users  int                    // calls running on the regions
	closed bool                   // unmap when the last user leaves
}

// testHookOpenStage, when set (tests), may fail rank's mapping of peer's
// region.
var testHookOpenStage func(rank, peer int) error

// stagesWanted says whether a rank creates a staging region before the
// bootstrap: shared-memory links, and GOTREE_ALGO allows shared
// allreduce. Whether the communicator can use it is known only from the
// table (stagesUsable).
func stagesWanted(cfg Config) bool {
	algos, err := algorithms.ParseAlgoSpec(cfg.Algo, algorithms.AllReduce)
	return !cfg.ShmDisable && err == nil && algos.Has(algorithms.Shared)
}

// stagesUsable says whether shared plans may run on the ranks of table:
// two or more, on one host, each with a staging region.
func stagesUsable(table []rankInfo) bool {
	for _, r := range table {
		if r.Stage == "" || r.HostID != table[0].HostID {
			return false
		}
	}
	return algorithms.SharedUsable(len(table), 1)
}

// createStage makes this rank's staging region when cfg wants one; a
// failure (a full /dev/shm) only turns shared plans off, and says so.
func createStage(cfg Config, log *Logger) *backend.StageRegion {
	if !stagesWanted(cfg) {
		return nil
	}
	s, err := backend.CreateStage(stageBytes)
	if err != nil {
		log.Warnf("shared allreduce off: %v", err)
		return nil
	}
	return s
}

// openStages maps every peer's staging region (own is this rank's), then
// exchanges with every peer whether it mapped them all; shared plans run
// only if every rank did. Every rank's own file is removed either way.
func (c *Comm) openStages(own *backend.StageRegion, deadline time.Time) error {
	regions := make([]*backend.StageRegion, c.nranks)
	regions[c.rank] = own
	var why error
	for r, info := range c.peers {
		if r == c.rank {
			continue
		}
		s, err := backend.OpenStage(info.Stage, stageBytes)
		if err == nil && testHookOpenStage != nil {
			if err = testHookOpenStage(c.rank, r); err != nil {
				s.Unmap()
			}
		}
		if err != nil {
			why = fmt.Errorf("rank %d's: %w", r, err)
			break
		}
		regions[r] = s
	}
	ok := why == nil
	mapped := false
	defer func() {
		if !mapped { // the peers' mappings; the caller unmaps its own on error
			for r, s := range regions {
				if s != nil && r != c.rank {
					s.Unmap()
				}
			}
		}
	}()
	ctx, cancel := context.WithDeadline(c.ctx, deadline)
	defer cancel()
	var msg [8]byte
	if ok {
		msg[0] = 1
	}
	all := ok
	for p := range c.peers {
		if p == c.rank {
			continue
		}
		l, err := c.Conn(0, p)
		if err == nil {
			err = l.Send(ctx, stageTag, msg[:])
		}
		if err != nil {
			return fmt.Errorf("rank %d: telling rank %d about the staging regions: %w", c.rank, p, err)
		}
	}
	for p := range c.peers {
		if p == c.rank {
			continue
		}
		l, _ := c.Conn(0, p)
		b, tag, err := l.Recv(ctx)
		if err != nil {
			return fmt.Errorf("rank %d: hearing from rank %d about the staging regions: %w", c.rank, p, err)
		}
		if tag != stageTag || len(b) != len(msg) {
			l.Release()
			return fmt.Errorf("%w: rank %d sent a %d-byte message with tag %08x where its staging region report was due", ErrRemote, p, len(b), tag)
		}
		all = all && b[0] == 1
		l.Release()
	}
	own.Unlink()
	if !all {
		own.Unmap()
		if why != nil {
			c.log.Warnf("shared allreduce off: %v", why)
		} else {
			c.log.Infof("INIT", "shared allreduce off: a peer could not map every staging region")
		}
		return nil
	}
	c.stages.region = regions
	c.sharedOn = true
	mapped = true
	c.log.Infof("INIT", "shared allreduce on: %d staging regions of %d KiB mapped", c.nranks, stageBytes>>10)
	return nil
}

// Stage is rank's staging region (backend.Stages); nil when shared plans
// do not run here.
func (c *Comm) Stage(rank int) []byte {
	if c.stages.region == nil || rank < 0 || rank >= len(c.stages.region) {
		return nil
	}
	return c.stages.region[rank].Bytes()
}

// StagePolicy is how waits on the staging regions' counters behave
// (backend.Stages): as the shared-memory links' waits.
func (c *Comm) StagePolicy() backend.WaitPolicy { return c.waitPolicy }

// enterStages marks a call that runs on the staging regions; false once
// the communicator is closing.
func (c *Comm) enterStages() bool {
	c.stages.mu.Lock()
	defer c.stages.mu.Unlock()
	if c.stages.closed || c.stages.region == nil {
		return false
	}
	c.stages.users++
	return true
}

// exitStages ends a call of enterStages; the last one out of a closing
// communicator unmaps the regions.
func (c *Comm) exitStages() {
	c.stages.mu.Lock()
	defer c.stages.mu.Unlock()
	c.stages.users--
	if c.stages.closed && c.stages.users == 0 {
		c.unmapStagesLocked()
	}
}

// closeStages unmaps the regions now, or when the last call on them ends.
func (c *Comm) closeStages() {
	c.stages.mu.Lock()
	defer c.stages.mu.Unlock()
	c.stages.closed = true
	if c.stages.users == 0 {
		c.unmapStagesLocked()
	}
}

func (c *Comm) unmapStagesLocked() {
	for _, s := range c.stages.region {
		if s != nil {
			s.Unmap()
		}
	}
	c.stages.region = nil
}
