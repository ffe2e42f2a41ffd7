// Package bench holds the performance benchmarks of issue 6: the outbox
// dispatcher against the raw broker and against the database side alone,
// what each part of the outbox table costs per event, commit-to-publish
// latency, the inbox consumer against raw consume-and-ack, the claim query
// on a large table and what the services cost when idle; and of issue 25,
// the saga's physical ceiling (BenchmarkSagaCeiling: the round trips of one
// order, with no service code). They need the real MariaDB/MySQL and
// RabbitMQ, like the integration tests, and each makes its own database
// and broker namespace.
//
// The package has benchmarks only: `go test ./...` runs nothing here.
// docs/performance.md gives the command behind every figure, for example
//
//	go test ./bench -run '^$' -bench OutboxDrain -benchtime 20000x
//
// Each benchmark reports its figure next to the ceiling it is compared with,
// measured in the same run (b.ReportMetric): events/s and ceiling_events/s,
// p99_ms and raw_p99_ms, and so on. Where a benchmark loads the database or
// the broker it also reports the CPU they used (db_cores, mq_cores,
// go_cores: 1.0 is one core busy for the whole measurement) so a reader can
// tell which side is the limit on this 2-core machine.
package bench
