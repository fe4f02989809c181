//! A simulated GPU: a capacity, memory already taken by other processes, and
//! deterministic addresses, so that every replay prints the same dump.

use super::{Device, DeviceDescription, DeviceError, MemInfo};
use std::collections::{BTreeMap, VecDeque};

/// Where simulated device addresses start (a typical CUDA address on Linux).
pub const SIM_BASE_ADDRESS: u64 = 0x7f00_0000_0000;
/// Where simulated reservations of address space start (PyTorch's expandable segments).
pub const SIM_RESERVED_BASE: u64 = 0x7e00_0000_0000;
/// Regions are aligned like `cuMemAlloc`'s, which hands out 2 MiB-aligned ranges.
const SIM_ALIGN: u64 = 2 << 20;

/// A GPU that exists only as numbers.
#[derive(Clone, Debug)]
pub struct SimDevice {
    total: u64,
    others: u64,
    model: String,
    used: u64,
    /// Live ranges: base address -> size.
    ranges: BTreeMap<u64, u64>,
    /// Where a recorded run's device put its regions, in order: (address, size).
    script: VecDeque<(u64, u64)>,
    /// Reserved address ranges (no memory behind them until mapped): base -> size.
    reserved: BTreeMap<u64, u64>,
    /// Where a recorded run's reservations were, in order.
    reservation_script: VecDeque<u64>,
}

impl SimDevice {
    /// A device of `total` bytes of which `others` are held by other processes
    /// (a desktop, another training run).
    pub fn new(total: u64, others: u64) -> SimDevice {
        SimDevice {
            total,
            others: others.min(total),
            model: "simulated GPU".to_string(),
            used: 0,
            ranges: BTreeMap::new(),
            script: VecDeque::new(),
            reserved: BTreeMap::new(),
            reservation_script: VecDeque::new(),
        }
    }

    /// Reserves address space where a recorded run's device did, in order.
    pub fn with_reservations(mut self, bases: impl IntoIterator<Item = u64>) -> SimDevice {
        self.reservation_script = bases.into_iter().collect();
        self
    }

    /// Hands out regions where a recorded run's device did: the next region asked for,
    /// when it is of the recorded size, gets the recorded address (the allocator's choices
    /// between equal free chunks follow address order, so a replay needs them to match the
    /// run it reproduces). A request of another size, or past the list, is placed as usual.
    pub fn with_addresses(mut self, regions: impl IntoIterator<Item = (u64, u64)>) -> SimDevice {
        self.script = regions.into_iter().collect();
        self
    }

    /// Names the card it stands for (`GeForce GTX 1080 Ti`); reports say it is simulated.
    pub fn with_model(mut self, model: &str) -> SimDevice {
        self.model = if model == "simulated GPU" { model.to_string() } else { format!("{model} (simulated)") };
        self
    }

    fn free_bytes(&self) -> u64 {
        self.total - self.others - self.used
    }

    /// The lowest aligned gap that holds `bytes`: first fit keeps addresses
    /// deterministic and reuses space that garbage collection gave back.
    fn place(&self, bytes: u64) -> u64 {
        let mut candidate = SIM_BASE_ADDRESS;
        for (&addr, &size) in &self.ranges {
            if candidate.saturating_add(bytes) <= addr {
                break;
            }
            candidate = addr.saturating_add(size).checked_next_multiple_of(SIM_ALIGN).unwrap_or(u64::MAX);
        }
        candidate
    }
}

impl Device for SimDevice {
    fn alloc(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        let free = self.free_bytes();
        if bytes == 0 || bytes > free {
            return Err(DeviceError::OutOfMemory { requested: bytes, free });
        }
        let scripted = self.script.front().copied().filter(|&(addr, size)| {
            size == bytes
                && self.ranges.range(..addr.saturating_add(size)).next_back().is_none_or(|(&a, &s)| a + s <= addr)
        });
        let addr = match scripted {
            Some((addr, _)) => {
                self.script.pop_front();
                addr
            }
            None => self.place(bytes),
        };
        self.ranges.insert(addr, bytes);
        self.used += bytes;
        Ok(addr)
    }

    fn free(&mut self, addr: u64, bytes: u64) -> Result<(), DeviceError> {
        match self.ranges.get(&addr) {
            Some(&size) if size == bytes => {
                self.ranges.remove(&addr);
                self.used -= size;
                Ok(())
            }
            Some(&size) => {
                Err(DeviceError::Other(format!("free of {bytes} bytes at {addr:#x}, but that range has {size} bytes")))
            }
            None => Err(DeviceError::Other(format!("free of unknown range at {addr:#x}"))),
        }
    }

    fn mem_info(&self) -> MemInfo {
        MemInfo { free: self.free_bytes(), total: self.total }
    }

    fn describe(&self) -> DeviceDescription {
        DeviceDescription { kind: oomscope_format::DeviceKind::Sim, model: self.model.clone(), others: self.others }
    }

    fn reserve(&mut self, bytes: u64) -> Result<u64, DeviceError> {
        // Address space is not memory: it comes from a range of its own, above the regions.
        let base = match self.reservation_script.pop_front() {
            Some(b) if self.reserved.range(..b.saturating_add(bytes)).next_back().is_none_or(|(&a, &s)| a + s <= b) => {
                b
            }
            _ => {
                let top = self.reserved.iter().next_back().map_or(SIM_RESERVED_BASE, |(&a, &s)| a.saturating_add(s));
                top.checked_next_multiple_of(SIM_ALIGN)
                    .filter(|b| b.checked_add(bytes).is_some())
                    .ok_or_else(|| DeviceError::Other(format!("no address space left for {bytes} bytes")))?
            }
        };
        self.reserved.insert(base, bytes);
        Ok(base)
    }

    fn map(&mut self, _addr: u64, bytes: u64) -> Result<(), DeviceError> {
        let free = self.free_bytes();
        if bytes > free {
            return Err(DeviceError::OutOfMemory { requested: bytes, free });
        }
        self.used += bytes;
        Ok(())
    }

    fn unmap(&mut self, _addr: u64, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
    }

    fn map_pages(&mut self, addr: u64, page: u64, count: u64) -> Result<(), DeviceError> {
        // Memory is only counted here: a run is mapped at once, whatever its pages.
        let bytes = page.saturating_mul(count);
        self.map(addr, bytes)
    }

    fn unmap_pages(&mut self, addr: u64, page: u64, count: u64) {
        self.unmap(addr, page.saturating_mul(count));
    }

    fn unreserve(&mut self, addr: u64, _bytes: u64) {
        self.reserved.remove(&addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_more_than_is_free_and_reuses_freed_space() {
        let mut d = SimDevice::new(10 << 30, 1 << 30);
        assert_eq!(d.mem_info(), MemInfo { free: 9 << 30, total: 10 << 30 });
        assert!(matches!(d.alloc(9 << 30 | 1), Err(DeviceError::OutOfMemory { .. })));
        let a = d.alloc(3 << 20).unwrap();
        let b = d.alloc(1 << 20).unwrap();
        assert_eq!(a, SIM_BASE_ADDRESS);
        assert_eq!(b, SIM_BASE_ADDRESS + (4 << 20), "aligned to 2 MiB after a");
        d.free(a, 3 << 20).unwrap();
        assert_eq!(d.alloc(2 << 20).unwrap(), SIM_BASE_ADDRESS, "first fit reuses the gap");
        assert!(d.free(b, 5).is_err());
        assert!(d.free(12345, 5).is_err());
    }

    #[test]
    fn recorded_addresses_are_handed_out_in_order_while_sizes_match() {
        let mut d =
            SimDevice::new(1 << 30, 0).with_addresses([(0x7fe1_e821_f040, 2 << 20), (0x7fe1_e2bf_d040, 4 << 20)]);
        assert_eq!(d.alloc(2 << 20).unwrap(), 0x7fe1_e821_f040);
        assert_eq!(d.alloc(4 << 20).unwrap(), 0x7fe1_e2bf_d040, "lower than the first, as the run's was");
        assert_eq!(d.alloc(8 << 20).unwrap(), SIM_BASE_ADDRESS, "past the list: placed as usual");
        let mut d = SimDevice::new(1 << 30, 0).with_addresses([(0x1000_0000, 2 << 20)]);
        assert_eq!(d.alloc(4 << 20).unwrap(), SIM_BASE_ADDRESS, "another size: the replay went another way");
    }
}
