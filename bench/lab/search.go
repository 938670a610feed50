package main

import (
	"errors"
	"time"
)

// Loss criteria of RFC 2544 / MLRsearch: the non-drop rate (NDR) is the
// highest offered load whose trial loses at most ndrLoss of the frames, the
// partial-drop rate (PDR) the highest that loses at most pdrLoss.
const (
	ndrLoss = 1e-6
	pdrLoss = 0.005
)

// trialFunc offers rate frames per second for d and reports what happened.
type trialFunc func(rate float64, d time.Duration) (trial, error)

// searchConfig bounds a search.
type searchConfig struct {
	Max   float64       // the highest rate to try (what the generator can offer)
	Min   float64       // below this the answer is 0
	Full  time.Duration // the trial duration a result must hold for (≥ 5 s in a real run)
	Short time.Duration // shorter trials while the interval is still wide (Full disables)
	// Goal is the relative width (hi-lo)/hi at which a search stops;
	// Coarse is the width above which short trials are used.
	Goal, Coarse float64
	// MaxTrials caps one search (0: 16).
	MaxTrials int
	// Progress, when set, hears of every trial.
	Progress func(criterion string, t trial)
}

// searchResult is one criterion's answer.
type searchResult struct {
	Rate float64 `json:"pps"` // the rate of the best passing full-length trial (0: none passed)
	// Trial is that trial, with its loss and the gateway's CPU.
	Trial  trial `json:"trial"`
	Trials int   `json:"trials"` // trials this search ran
	// Limited: the generator set the bound, not the gateway: even Max
	// passed, or the generator fell short of the rate the search asked for.
	Limited bool `json:"generator_limited"`
	// Confirmed: a second full-length trial at Rate passed too (findConfirmed).
	Confirmed bool `json:"confirmed,omitempty"`
}

// confirmRounds caps how often findConfirmed searches again below a rate
// whose confirming trial failed.
const confirmRounds = 4

// searcher runs NDR and PDR searches over one trial function, sharing what
// earlier trials showed: a rate that failed PDR fails NDR, a full-length
// trial that met NDR meets PDR.
type searcher struct {
	cfg     searchConfig
	run     trialFunc
	history []trial
	// caps holds, per loss criterion, the rate whose confirming trial
	// failed: no pass at or above it counts for that criterion again.
	caps map[float64]float64
}

func (t trial) passes(maxLoss float64) bool { return t.Sent > 0 && t.Loss() <= maxLoss }

// trial runs one trial, keeps it in the history and tells Progress.
func (s *searcher) trial(name string, rate float64, d time.Duration) (trial, error) {
	t, err := s.run(rate, d)
	if err != nil {
		return t, err
	}
	t.Target = rate
	t.Duration = d
	s.history = append(s.history, t)
	if s.cfg.Progress != nil {
		s.cfg.Progress(name, t)
	}
	return t, nil
}

// findConfirmed is find whose answer counts only when a second
// full-length trial at its rate passes as well: one trial decides a rate
// that moves by ±9 % between runs here (issue 34). When the confirming
// trial fails, its rate caps the criterion and the search runs again
// below it, up to confirmRounds times; no confirmed rate is a rate of 0.
// The answer is the lower of the two trials' offered rates.
func (s *searcher) findConfirmed(name string, maxLoss float64) (searchResult, error) {
	trials := 0
	for range confirmRounds {
		res, err := s.find(name, maxLoss)
		res.Trials += trials
		if err != nil || res.Rate == 0 {
			return res, err
		}
		t, err := s.trial(name+" confirm", res.Rate, s.cfg.Full)
		if err != nil {
			return res, err
		}
		res.Trials++
		trials = res.Trials
		if t.passes(maxLoss) {
			// A generator that fell short offered less the second
			// time: both passed only the lower rate.
			if t.Offered() < res.Rate {
				res.Rate, res.Trial = t.Offered(), t
			}
			res.Confirmed = true
			return res, nil
		}
		if s.caps == nil {
			s.caps = map[float64]float64{}
		}
		s.caps[maxLoss] = min(res.Rate, t.Offered())
	}
	return searchResult{Trials: trials}, nil
}

// find searches the highest rate whose full-length trial loses at most
// maxLoss: bisection between the best known pass and the lowest known
// failure (rates as offered, not as asked for), with short trials while the interval is wider than Coarse, and
// the final lower bound always confirmed by a full-length trial.
func (s *searcher) find(name string, maxLoss float64) (searchResult, error) {
	c := s.cfg
	if c.Max <= 0 || c.Full <= 0 || c.Goal <= 0 {
		return searchResult{}, errors.New("search: Max, Full and Goal must be positive")
	}
	if c.MaxTrials == 0 {
		c.MaxTrials = 16
	}
	var res searchResult
	// lo is the best pass of any length, full the best full-length one.
	// A pass counts only below the lowest failure: a failure below a
	// pass says the pass was luck.
	var lo, hi float64 = 0, s.caps[maxLoss]
	for _, t := range s.history {
		if !t.passes(maxLoss) && (hi == 0 || t.Offered() < hi) {
			hi = t.Offered()
		}
	}
	var full trial
	for _, t := range s.history {
		if t.passes(maxLoss) && t.Duration >= c.Full && t.Offered() > full.Offered() && (hi == 0 || t.Offered() < hi) {
			full = t
		}
	}
	lo = full.Offered()
	try := func(rate float64, d time.Duration) (trial, error) {
		t, err := s.trial(name, rate, d)
		if err == nil {
			res.Trials++
		}
		return t, err
	}
	if hi == 0 {
		// Nothing has failed yet: the top first, at full length.
		t, err := try(c.Max, c.Full)
		if err != nil {
			return res, err
		}
		if t.passes(maxLoss) {
			res.Rate, res.Trial, res.Limited = t.Offered(), t, true
			return res, nil
		}
		hi = t.Offered()
	}
	if lo >= hi {
		lo = 0
	}
	shortOK := c.Short > 0 && c.Short < c.Full
	stuck := false
	for res.Trials < c.MaxTrials {
		if hi < c.Min {
			break
		}
		if stuck || (hi-lo)/hi <= c.Goal {
			if lo == full.Offered() {
				break
			}
			// Confirm the lower bound at full length.
			t, err := try(lo, c.Full)
			if err != nil {
				return res, err
			}
			if t.passes(maxLoss) {
				full = t
				break
			}
			// The short trial was too kind: bisect at full length from here.
			hi, lo, shortOK, stuck = t.Offered(), full.Offered(), false, false
			continue
		}
		d := c.Full
		if shortOK && (hi-lo)/hi > c.Coarse {
			d = c.Short
		}
		mid := (lo + hi) / 2
		t, err := try(mid, d)
		if err != nil {
			return res, err
		}
		// The rate tested is what the generator offered, which falls
		// short of mid when its core was taken from it.
		if r := t.Offered(); t.passes(maxLoss) {
			if r <= lo {
				// The generator could not offer more than a rate
				// already passed: the search cannot narrow further.
				res.Limited, stuck = true, true
				continue
			}
			lo = r
			if d >= c.Full && r > full.Offered() {
				full = t
			}
		} else {
			hi = min(hi, r)
		}
	}
	if full.Sent > 0 {
		res.Rate, res.Trial = full.Offered(), full
	}
	return res, nil
}
