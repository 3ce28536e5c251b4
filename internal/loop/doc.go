// Package loop runs a replica's periodic background work (the scheduler's
// passes, the retention sweeper's): a pass at once, then one every
// interval, in a goroutine of its own, until Stop.
package loop
