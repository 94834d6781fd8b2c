"""What paging replaced (lessons 09, 11, 14): the reservation allocator, and both allocators replayed on one trace."""
