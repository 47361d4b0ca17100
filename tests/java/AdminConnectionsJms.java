import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import javax.jms.Connection;
import javax.jms.MessageConsumer;
import javax.jms.MessageProducer;
import javax.jms.Session;

import org.apache.activemq.ActiveMQConnectionFactory;

/**
 * The OpenWire side of the admin endpoint's connection list test
 * (tests/tests/integration/admin_connections.rs), with the real ActiveMQ 5.x client: one
 * connection with client id "adm-jms", a consumer on the queue adm.jms.in, a producer on the
 * queue adm.jms.out that sent one message, and an anonymous producer that sent none. Then one
 * command a line on stdin, each answered on stdout by "ok COMMAND" (or "FAIL why", then exit 1):
 *
 * <pre>
 *   send COUNT   the producer sends COUNT more (persistent, synchronous)
 *   closed       waits (20 s at most) until the broker has closed the connection
 *   quit
 *
 *   java -cp $FERROMQ_JMS_CLASSPATH AdminConnectionsJms --url tcp://127.0.0.1:PORT --user U --password P
 * </pre>
 */
public final class AdminConnectionsJms {
    static final long WAIT_MS = 20_000;

    public static void main(String[] args) throws Exception {
        String url = null;
        String user = null;
        String password = null;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--url" -> url = args[i + 1];
                case "--user" -> user = args[i + 1];
                case "--password" -> password = args[i + 1];
                default -> fail("unknown option " + args[i]);
            }
        }
        if (url == null) {
            fail("usage: AdminConnectionsJms --url tcp://HOST:PORT [--user U --password P]");
        }
        ActiveMQConnectionFactory factory = new ActiveMQConnectionFactory(url);
        Connection connection = factory.createConnection(user, password);
        connection.setClientID("adm-jms");
        CountDownLatch lost = new CountDownLatch(1);
        connection.setExceptionListener(error -> lost.countDown());
        connection.start();
        Session session = connection.createSession(false, Session.AUTO_ACKNOWLEDGE);
        MessageConsumer consumer = session.createConsumer(session.createQueue("adm.jms.in"));
        MessageProducer producer = session.createProducer(session.createQueue("adm.jms.out"));
        MessageProducer anonymous = session.createProducer(null);
        producer.send(session.createTextMessage("jms 0"));
        System.out.println("ready");
        BufferedReader input = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = input.readLine()) != null) {
            String[] words = line.trim().split("\\s+");
            try {
                if (words.length == 1 && words[0].equals("quit")) {
                    break;
                } else if (words.length == 2 && words[0].equals("send")) {
                    int count = Integer.parseInt(words[1]);
                    for (int i = 0; i < count; i++) {
                        producer.send(session.createTextMessage("jms " + (i + 1)));
                    }
                } else if (words.length == 1 && words[0].equals("closed")) {
                    if (!lost.await(WAIT_MS, TimeUnit.MILLISECONDS)) {
                        fail("the connection is still open after " + WAIT_MS + " ms");
                    }
                    System.out.println("ok closed");
                    System.out.flush();
                    // A closed connection's close would only throw.
                    return;
                } else {
                    fail("unknown command: " + line);
                }
            } catch (Exception error) {
                fail(line + ": " + error);
            }
            System.out.println("ok " + line.trim());
            System.out.flush();
        }
        consumer.close();
        anonymous.close();
        connection.close();
    }

    static void fail(String why) {
        System.out.println("FAIL " + why);
        System.out.flush();
        System.exit(1);
    }
}
