//! The memory budget of one instance (`limits.memoryMiB`): every linear memory and
//! every table of the instance's store, counted together.
//!
//! wasmtime's `StoreLimits` caps each linear memory on its own, while a component may
//! define several: one per core module it is composed of, or several in one module
//! (multi-memory). Four memories each grown to the cap held four times what the policy
//! allowed, and four times what the host's budget counts for the instance (`poolSize x
//! memoryMiB`). [`MemoryBudget`] is the store's [`ResourceLimiter`] instead: a new
//! memory or table is a growth from nothing, and a growth that would take the sum of
//! all of them past the budget is refused (`memory.grow` and `table.grow` answer -1; a
//! Rust guest then aborts, a trap, and the pool replaces the instance).
//!
//! The sum only grows: a store holds one instance for its whole life, and wasmtime
//! frees its memories and tables only with the store. A growth past a memory's or a
//! table's own maximum is refused before it is counted. A growth the budget allowed
//! that then failed all the same (the operating system refused the pages) stays
//! counted, which errs on the safe side: wasmtime's `memory_grow_failed` does not say
//! which growth failed, and is also called for growths that never reached
//! `memory_growing`, so subtracting there could hand the guest back bytes it holds.

use wasmtime::ResourceLimiter;

/// Core instances a store may create: a Rust component is a few (its program, WASI
/// adapters, the shims joining them).
pub const MAX_INSTANCES: usize = 32;
/// Linear memories a store may create (the pooling allocator also holds a component to
/// [`crate::engine::MAX_MEMORIES_PER_COMPONENT`]).
pub const MAX_MEMORIES: usize = 8;
/// Tables a store may create.
pub const MAX_TABLES: usize = 32;
/// Elements one table may hold.
pub const MAX_TABLE_ELEMENTS: usize = 100_000;
/// Bytes counted for one table element: two machine words, the largest element
/// wasmtime 48 stores (a continuation reference; a function reference is one word, a
/// GC reference 4 bytes). This host enables neither GC nor stack switching, so its
/// tables hold function references and the count is an upper bound, whatever a
/// table's type.
pub const TABLE_ELEMENT_BYTES: usize = 2 * size_of::<usize>();

/// The store's resource limiter: all linear memories and tables of one instance
/// within `limits.memoryMiB`.
#[derive(Debug, Clone)]
pub struct MemoryBudget {
    /// The most bytes the store's memories and tables may hold together.
    limit: usize,
    /// Bytes granted so far.
    used: usize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes, nothing used.
    pub fn new(limit: usize) -> Self {
        Self { limit, used: 0 }
    }

    /// The most bytes the store's memories and tables may hold together.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes granted to the store's memories and tables so far.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Counts `bytes` more if they fit; whether they did.
    fn grant(&mut self, bytes: usize) -> bool {
        match self.used.checked_add(bytes) {
            Some(total) if total <= self.limit => {
                self.used = total;
                true
            }
            _ => false,
        }
    }
}

impl ResourceLimiter for MemoryBudget {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        Ok(self.grant(desired.saturating_sub(current)))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > MAX_TABLE_ELEMENTS || maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        let elements = desired.saturating_sub(current);
        Ok(self.grant(elements.saturating_mul(TABLE_ELEMENT_BYTES)))
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1 << 20;
    const PAGE: usize = 64 << 10;

    #[test]
    fn every_memory_counts_against_one_budget() {
        let mut budget = MemoryBudget::new(4 * MIB);
        // Three memories created (a growth from nothing), 1 MiB each.
        for _ in 0..3 {
            assert!(budget.memory_growing(0, MIB, None).unwrap());
        }
        // One of them grows to 2 MiB: the budget is full.
        assert!(budget.memory_growing(MIB, 2 * MIB, None).unwrap());
        assert_eq!(budget.used(), 4 * MIB);
        // Another page anywhere is refused, though every memory is under 4 MiB.
        assert!(!budget.memory_growing(MIB, MIB + PAGE, None).unwrap());
        assert!(!budget.memory_growing(0, PAGE, None).unwrap());
        assert_eq!(budget.used(), 4 * MIB);
    }

    #[test]
    fn a_refused_growth_is_not_counted() {
        let mut budget = MemoryBudget::new(MIB);
        assert!(!budget.memory_growing(0, 2 * MIB, None).unwrap());
        assert_eq!(budget.used(), 0);
        assert!(budget.memory_growing(0, MIB, None).unwrap());
        assert_eq!(budget.used(), MIB);
    }

    #[test]
    fn growth_past_a_declared_maximum_is_refused_and_not_counted() {
        let mut budget = MemoryBudget::new(MIB);
        assert!(!budget.memory_growing(PAGE, 2 * PAGE, Some(PAGE)).unwrap());
        assert!(!budget.table_growing(10, 11, Some(10)).unwrap());
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn tables_count_by_element_with_memories() {
        let elements = 1_000;
        let mut budget = MemoryBudget::new(PAGE + elements * TABLE_ELEMENT_BYTES);
        assert!(budget.memory_growing(0, PAGE, None).unwrap());
        assert!(budget.table_growing(0, elements / 2, None).unwrap());
        assert!(budget.table_growing(0, elements / 2, None).unwrap());
        assert_eq!(budget.used(), budget.limit());
        assert!(
            !budget
                .table_growing(elements / 2, elements / 2 + 1, None)
                .unwrap()
        );
        assert!(!budget.memory_growing(PAGE, 2 * PAGE, None).unwrap());
    }

    #[test]
    fn a_table_holds_at_most_max_table_elements() {
        let mut budget = MemoryBudget::new(usize::MAX);
        assert!(
            !budget
                .table_growing(0, MAX_TABLE_ELEMENTS + 1, None)
                .unwrap()
        );
        assert!(budget.table_growing(0, MAX_TABLE_ELEMENTS, None).unwrap());
    }

    #[test]
    fn huge_requests_are_refused_without_overflow() {
        let mut budget = MemoryBudget::new(64 * MIB);
        assert!(budget.memory_growing(0, MIB, None).unwrap());
        assert!(!budget.memory_growing(0, usize::MAX, None).unwrap());
        assert!(!budget.memory_growing(MIB, usize::MAX, None).unwrap());
        assert!(!budget.table_growing(0, usize::MAX, None).unwrap());
        assert_eq!(budget.used(), MIB);
    }

    /// Through a real store, as `provider::pool` installs it: memories the host creates
    /// and grows share the one budget.
    #[test]
    fn a_store_s_memories_share_its_budget() {
        use wasmtime::{Engine, Memory, MemoryType, Store};
        let engine = Engine::default();
        let mut store = Store::new(&engine, MemoryBudget::new(4 * MIB));
        store.limiter(|budget| budget);
        // 2 MiB and 1 MiB (32 and 16 pages of 64 KiB).
        let first = Memory::new(&mut store, MemoryType::new(32, None)).unwrap();
        let second = Memory::new(&mut store, MemoryType::new(16, None)).unwrap();
        first.grow(&mut store, 16).unwrap();
        assert_eq!(store.data().used(), 4 * MIB);
        assert!(second.grow(&mut store, 1).is_err());
        assert!(Memory::new(&mut store, MemoryType::new(1, None)).is_err());
        assert_eq!(second.size(&store), 16);
    }
}
