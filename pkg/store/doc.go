// Package store is what agentd's durable thread stores share: the Threads
// contract they implement beyond agent.Store (listing, deletion, a
// thread's sandbox), the listing query and its page tokens, the JSON
// document of a thread's latest state, and the errors callers map to gRPC
// codes. The stores themselves live in subpackages: sqlite (embedded, the
// default) and postgres (shared by several agentd replicas). What both
// stores do alike lives here too: the row decoders and their column lists
// (ScanSchedule and ScheduleColumns, ...; any driver's row is a Scanner)
// and the page cutters of the listings, so that a store keeps only its SQL.
//
// It must not depend on any store implementation or on gRPC.
package store
