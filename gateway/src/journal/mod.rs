//! The durable command journal (placeholder until the journal lands).
