! group_fortran — kioku group checkpoints from Fortran through ISO_C_BINDING.
!
! usage: group_fortran STEPS
! Each rank keeps an array of 100000 reals and a step counter in protected memory. Step s
! adds s * (rank + 1) to every element. After a restart the program recovers, checks every
! element against the value the recovered step implies, and goes on to STEPS.
! Prints "fortran rank R recovered step S ok" after a recovery and "fortran rank R done S".
! (The crash test kills a rank with KIOKU_FAULT, the library's fault injection.)
program group_fortran
  use mpi
  use, intrinsic :: iso_c_binding
  implicit none

  ! struct kioku_group_status of kioku_group.h, version 1: the fields kioku_group_status
  ! fills (kioku_group_status_size fills the newer ones too).
  type, bind(c) :: group_status
    integer(c_int32_t) :: rank, size, group, group_size, position, rs_k, rs_m, must_recover
    integer(c_int64_t) :: epoch
    integer(c_int32_t) :: last_level, recovered_level
    integer(c_int64_t) :: recovered_epoch, recovered_lost, recovered_ns
    integer(c_int64_t) :: recovered_decode_ns, recovered_bytes
    integer(c_int64_t) :: last_dirty_pages, last_encoded_pages, last_bytes_sent
    integer(c_int64_t) :: last_encode_ns, last_persist_ns, last_total_ns
  end type

  interface
    integer(c_int) function kioku_group_status(out) bind(c, name='kioku_group_status')
      import :: c_int, group_status
      type(group_status), intent(out) :: out
    end function
    integer(c_int) function kioku_group_init_f(comm, config) bind(c, name='kioku_group_init_f')
      import :: c_int, c_ptr
      integer(c_int), value :: comm
      type(c_ptr), value :: config
    end function
    integer(c_int) function kioku_group_finalize() bind(c, name='kioku_group_finalize')
      import :: c_int
    end function
    type(c_ptr) function kioku_group_alloc(id, size) bind(c, name='kioku_group_alloc')
      import :: c_ptr, c_int32_t, c_size_t
      integer(c_int32_t), value :: id
      integer(c_size_t), value :: size
    end function
    integer(c_int) function kioku_group_checkpoint(level) bind(c, name='kioku_group_checkpoint')
      import :: c_int
      integer(c_int), value :: level
    end function
    integer(c_int) function kioku_group_recover() bind(c, name='kioku_group_recover')
      import :: c_int
    end function
  end interface

  integer, parameter :: n = 100000
  integer(c_int), parameter :: level_rs = 3
  integer :: ierr, rank, steps, s, i
  character(len=32) :: arg
  integer(c_int) :: rc
  type(c_ptr) :: p
  real(c_double), pointer :: a(:)
  integer(c_int64_t), pointer :: step(:)
  logical :: restarted
  real(c_double) :: want
  type(group_status) :: st

  call get_command_argument(1, arg)
  read (arg, *) steps
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  rc = kioku_group_init_f(int(MPI_COMM_WORLD, c_int), c_null_ptr)
  if (rc /= 0) call fail('init', rc)
  rc = kioku_group_status(st)
  restarted = st%must_recover /= 0
  if (restarted) then
    rc = kioku_group_recover()
    if (rc /= 0) call fail('recover', rc)
  end if
  p = kioku_group_alloc(2_c_int32_t, int(8, c_size_t))
  if (.not. c_associated(p)) call fail('alloc', -1_c_int)
  call c_f_pointer(p, step, [1])
  p = kioku_group_alloc(1_c_int32_t, int(8 * n, c_size_t))
  if (.not. c_associated(p)) call fail('alloc', -1_c_int)
  call c_f_pointer(p, a, [n])

  if (restarted) then
    want = real(step(1) * (step(1) + 1) / 2, c_double) * real(rank + 1, c_double)
    do i = 1, n
      if (a(i) /= want) then
        print '(a,i0,a,i0)', 'fortran rank ', rank, ' wrong value at ', i
        call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
      end if
    end do
    print '(a,i0,a,i0,a)', 'fortran rank ', rank, ' recovered step ', step(1), ' ok'
  end if

  do s = int(step(1)) + 1, steps
    a = a + real(s * (rank + 1), c_double)
    step(1) = s
    rc = kioku_group_checkpoint(level_rs)
    if (rc /= 0) call fail('checkpoint', rc)
  end do
  print '(a,i0,a,i0)', 'fortran rank ', rank, ' done ', step(1)
  rc = kioku_group_finalize()
  call MPI_Finalize(ierr)

contains

  subroutine fail(what, code)
    character(len=*), intent(in) :: what
    integer(c_int), intent(in) :: code
    print '(a,i0,a,a,a,i0)', 'fortran rank ', rank, ' error ', what, ' ', code
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end subroutine

end program group_fortran
