// Poco::Redis (Debian's libpoco-dev 1.11) through lockproxy: the lock flow
// C++ code writes with it: Command::set with overwrite false (SET key value
// NX) and PX appended, execute<T> for one command, sendCommands for a
// pipeline, and a check-and-set transaction.
//
// Built and run by compat/langs_test.go, against one plain redis-server and
// through lockproxy:
//
//     poco_redis_lock PORT PREFIX
//
// Each "STEP name result" line is compared with the plain run's; at each
// "CHECK ..." line the test reads the masters and answers "ok" (runDriven).
// An assertion that fails exits 1 with the reason on stderr.
#include <Poco/Exception.h>
#include <Poco/Redis/Array.h>
#include <Poco/Redis/Client.h>
#include <Poco/Redis/Command.h>
#include <Poco/Redis/Error.h>
#include <Poco/Redis/Exception.h>
#include <Poco/Version.h>

#include <cstdlib>
#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

using Poco::Int64;
using Poco::Redis::Array;
using Poco::Redis::BulkString;
using Poco::Redis::Client;
using Poco::Redis::Command;
using Poco::Redis::RedisType;

namespace {

[[noreturn]] void fail(const std::string& msg)
{
	std::cerr << "FAIL: " << msg << std::endl;
	std::exit(1);
}

void expect(bool cond, const std::string& msg)
{
	if (!cond)
		fail(msg);
}

void check(const std::string& what)
{
	std::cout << "CHECK " << what << std::endl;
	std::string answer;
	if (!std::getline(std::cin, answer) || answer != "ok")
		fail("checkpoint " + what + ": test answered " + answer);
}

// firstWord keeps the error code of a server error (both servers' texts
// differ in detail).
std::string firstWord(const std::string& s)
{
	return s.substr(0, s.find(' '));
}

// show renders a reply: "string", +status, :integer, nil, [arrays], and
// errors by their code.
std::string show(const RedisType::Ptr& r)
{
	if (r.isNull())
		return "(none)";
	switch (r->type()) {
	case Poco::Redis::RedisTypeTraits<std::string>::TypeId:
		return "+" + r->toString().substr(1, r->toString().size() - 3);
	case Poco::Redis::RedisTypeTraits<Int64>::TypeId:
		return r->toString().substr(0, r->toString().size() - 2);
	case Poco::Redis::RedisTypeTraits<Poco::Redis::Error>::TypeId:
		return "error " + firstWord(r->toString().substr(1));
	case Poco::Redis::RedisTypeTraits<BulkString>::TypeId: {
		auto& b = static_cast<const Poco::Redis::Type<BulkString>&>(*r).value();
		return b.isNull() ? "nil" : "\"" + b.value() + "\"";
	}
	case Poco::Redis::RedisTypeTraits<Array>::TypeId: {
		auto& a = static_cast<const Poco::Redis::Type<Array>&>(*r).value();
		if (a.isNull())
			return "nil-array";
		std::string out = "[";
		for (auto it = a.begin(); it != a.end(); ++it)
			out += (it != a.begin() ? "," : "") + show(*it);
		return out + "]";
	}
	}
	return "type?";
}

// step sends cmd on c and prints its reply; a server error is a reply
// here, as Poco's sendCommand returns it (execute<T> throws it).
RedisType::Ptr step(const std::string& name, Client& c, const Array& cmd)
{
	RedisType::Ptr r = c.sendCommand(cmd);
	std::cout << "STEP " << name << " " << show(r) << std::endl;
	return r;
}

void print(const std::string& name, const std::string& result)
{
	std::cout << "STEP " << name << " " << result << std::endl;
}

Command cmd(std::initializer_list<std::string> args)
{
	auto it = args.begin();
	Command c(*it++);
	for (; it != args.end(); ++it)
		c << *it;
	return c;
}

const std::string extendScript =
	"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
const std::string releaseScript =
	"if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

// handshake sends what C++ services send after connecting.
void handshake(Client& c)
{
	step("ping", c, cmd({"PING"}));
	step("auth without requirepass", c, cmd({"AUTH", "secret"}));
	step("select 0", c, cmd({"SELECT", "0"}));
	step("client setname", c, cmd({"CLIENT", "SETNAME", "cpp-named"}));
	step("client getname", c, cmd({"CLIENT", "GETNAME"}));
	BulkString info = c.execute<BulkString>(cmd({"INFO", "server"}));
	print("info server has redis_version", info.value().find("redis_version:") != std::string::npos ? "yes" : "no");
	step("echo", c, cmd({"ECHO", "hi"}));
}

} // namespace

int main(int argc, char** argv)
{
	if (argc != 3)
		fail("usage: poco_redis_lock PORT PREFIX");
	int port = std::atoi(argv[1]);
	std::string prefix = argv[2];
	std::cout << "Poco::Redis " << (POCO_VERSION >> 24) << "." << ((POCO_VERSION >> 16) & 0xff) << "."
		  << ((POCO_VERSION >> 8) & 0xff) << std::endl;
	const std::string key = prefix + "lock", tok = "cpp-token-a", other = "cpp-token-b";
	try {
		Client c("127.0.0.1", port), c2("127.0.0.1", port);
		c.setReceiveTimeout(Poco::Timespan(5, 0));
		c2.setReceiveTimeout(Poco::Timespan(5, 0));

		handshake(c);

		// Command::set(key, value, overwrite = false, expiry) is meant to
		// be SET key value NX PX ms, but Poco 1.11 sends the expiry as a
		// RESP integer (":5000") inside the command array: Redis answers a
		// protocol error and closes the connection, and so does lockproxy.
		{
			Client c3("127.0.0.1", port);
			step("Command::set with expiry (Poco 1.11 sends :5000)", c3,
			     Command::set(key, tok, false, Poco::Timespan(5, 0)));
		}
		// What Poco users write instead: the expiry as a string.
		Command acquire = Command::set(key, tok, false);
		acquire << "PX" << std::to_string(5000);
		expect(step("set nx px", c, acquire)->toString() == "+OK\r\n", "SET NX PX refused a free lock");
		check("held " + key + " " + tok);
		BulkString got = c2.execute<BulkString>(cmd({"SET", key, other, "NX", "PX", "5000"}));
		print("contender set nx px", got.isNull() ? "nil" : got.value());
		expect(got.isNull(), "a contender got a held lock");
		print("get", c.execute<BulkString>(Command::get(key)).value());
		print("exists", std::to_string(c.execute<Int64>(Command::exists(key))));
		Int64 t = c.execute<Int64>(cmd({"PTTL", key}));
		print("pttl in 1000..5000", t >= 1000 && t <= 5000 ? "yes" : "no");
		expect(c.execute<Int64>(cmd({"EVAL", extendScript, "1", key, tok, "8000"})) == 1, "extend failed");
		print("eval extend", "1");
		check("pttl " + key + " 6000 8000");
		step("stranger's extend", c2, cmd({"EVAL", extendScript, "1", key, other, "9000"}));
		step("stranger's release", c2, cmd({"EVAL", releaseScript, "1", key, other}));
		check("held " + key + " " + tok);
		std::string sha = c.execute<BulkString>(cmd({"SCRIPT", "LOAD", releaseScript})).value();
		print("script load", sha);
		step("script exists", c, cmd({"SCRIPT", "EXISTS", sha, std::string(40, '0')}));
		step("evalsha of an unknown sha1", c, cmd({"EVALSHA", std::string(40, '0'), "1", key, tok}));
		step("stranger's evalsha release", c2, cmd({"EVALSHA", sha, "1", key, other}));
		check("held " + key + " " + tok);

		// sendCommands: every command written, then every reply read.
		std::vector<Array> pipeline = {Command::get(key), cmd({"PTTL", key}), Command::exists(key),
					       cmd({"SET", key, other, "NX", "PX", "5000"})};
		Array replies = c.sendCommands(pipeline);
		Int64 pt = replies.get<Int64>(1);
		print("pipeline get, pttl, exists, set nx px",
		      replies.get<BulkString>(0).value() + " " + (pt >= 1000 && pt <= 8000 ? "pttl-ok" : "pttl-out") + " " +
			      std::to_string(replies.get<Int64>(2)) + " " + (replies.get<BulkString>(3).isNull() ? "nil" : "set"));

		// A check-and-set release: WATCH, GET, then MULTI, DEL, EXEC.
		step("watch", c, cmd({"WATCH", key}));
		expect(c.execute<BulkString>(Command::get(key)).value() == tok, "the holder read another value");
		step("multi", c, cmd({"MULTI"}));
		step("del", c, Command::del(key));
		step("exec", c, cmd({"EXEC"}));
		check("gone " + key);

		step("set ex nx", c2, cmd({"SET", key, other, "EX", "5", "NX"}));
		check("held " + key + " " + other);
		step("evalsha release", c2, cmd({"EVALSHA", sha, "1", key, other}));
		check("gone " + key);
		step("release again", c2, cmd({"EVALSHA", sha, "1", key, other}));
		step("quit", c, cmd({"QUIT"}));
	} catch (Poco::Exception& e) {
		fail(e.displayText());
	}
	return 0;
}
