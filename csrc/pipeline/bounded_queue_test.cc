#include "pipeline/bounded_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace ringloader {
namespace {

TEST(BoundedQueueTest, FifoAndCapacity) {
  BoundedQueue<int> q(3);
  EXPECT_EQ(q.capacity(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(q.TryPush(i));
  EXPECT_FALSE(q.TryPush(99)) << "full queue must refuse";
  for (int i = 0; i < 4; ++i) EXPECT_EQ(q.TryPop(), i);
  EXPECT_FALSE(q.TryPop().has_value());
}

TEST(BoundedQueueTest, CloseDrainsThenFails) {
  BoundedQueue<int> q(4);
  ASSERT_TRUE(q.Push(1));
  ASSERT_TRUE(q.Push(2));
  q.Close();
  EXPECT_FALSE(q.Push(3));
  EXPECT_EQ(q.Pop(), 1);
  EXPECT_EQ(q.Pop(), 2);
  EXPECT_FALSE(q.Pop().has_value());
}

TEST(BoundedQueueTest, CloseWakesBlockedConsumersAndProducers) {
  BoundedQueue<int> empty(2);
  BoundedQueue<int> full(2);
  ASSERT_TRUE(full.TryPush(1));
  ASSERT_TRUE(full.TryPush(2));
  std::thread consumer([&] { EXPECT_FALSE(empty.Pop().has_value()); });
  std::thread producer([&] { EXPECT_FALSE(full.Push(3)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  empty.Close();
  full.Close();
  consumer.join();
  producer.join();
}

// Many producers and consumers through a tiny queue: every value arrives exactly once, and each
// producer's values arrive in the order it pushed them.
TEST(BoundedQueueTest, ManyProducersManyConsumersExactlyOnce) {
  constexpr int kProducers = 4, kConsumers = 4, kPerProducer = 20000;
  BoundedQueue<int64_t> q(8);
  std::vector<std::atomic<int>> seen(kProducers * kPerProducer);
  std::atomic<int> consumed{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < kProducers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < kPerProducer; ++i) ASSERT_TRUE(q.Push(int64_t{p} * kPerProducer + i));
    });
  }
  std::atomic<bool> order_ok{true};
  for (int c = 0; c < kConsumers; ++c) {
    threads.emplace_back([&] {
      std::vector<int64_t> last(kProducers, -1);
      while (std::optional<int64_t> v = q.Pop()) {
        const int producer = static_cast<int>(*v / kPerProducer);
        if (*v <= last[producer]) order_ok = false;
        last[producer] = *v;
        seen[*v].fetch_add(1);
        if (consumed.fetch_add(1) + 1 == kProducers * kPerProducer) q.Close();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(consumed.load(), kProducers * kPerProducer);
  EXPECT_TRUE(order_ok.load());
  for (auto& s : seen) ASSERT_EQ(s.load(), 1);
}

// Counts constructions and destructions: no value is leaked or destroyed twice.
struct Counted {
  static std::atomic<int> live;
  int value = 0;
  Counted() { ++live; }
  explicit Counted(int v) : value(v) { ++live; }
  Counted(const Counted& o) : value(o.value) { ++live; }
  Counted(Counted&& o) noexcept : value(o.value) { ++live; }
  Counted& operator=(const Counted&) = default;
  Counted& operator=(Counted&&) = default;
  ~Counted() { --live; }
};
std::atomic<int> Counted::live{0};

TEST(BoundedQueueTest, NoLeakedValues) {
  {
    BoundedQueue<Counted> q(4);
    const int cells = Counted::live.load();  // default-constructed cells
    ASSERT_TRUE(q.TryPush(Counted(1)));
    ASSERT_TRUE(q.TryPush(Counted(2)));
    EXPECT_EQ(q.TryPop()->value, 1);
    EXPECT_EQ(Counted::live.load(), cells);
  }
  EXPECT_EQ(Counted::live.load(), 0);
}

}  // namespace
}  // namespace ringloader
