"""What paging replaced (lessons 09, 11, 14, 16): the reservation allocator, both allocators replayed on one trace."""
